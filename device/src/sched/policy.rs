//! [`Policy`]: which ready task a device manager hands out first (the
//! runtime reads `TILEJIT_SIM_POLICY` into one).

/// Which ready task a device manager hands out first.
///
/// ```
/// use tilejit_device::Policy;
/// assert_eq!(Policy::from_name(" Newest "), Some(Policy::NewestFirst));
/// assert_eq!(Policy::Fair.name(), "fair");
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    /// Oldest ready task first.
    #[default]
    Fifo,
    /// Newest ready task first: a successor runs while its inputs are
    /// still in L2.
    NewestFirst,
    /// FIFO, and no manager fills a core's pending slot while another
    /// manager's cores sit idle.
    Fair,
}

impl Policy {
    /// `fifo`, `newest-first`, `fair`.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::NewestFirst => "newest-first",
            Policy::Fair => "fair",
        }
    }

    /// Parses [`Policy::name`] (also `newest`), case-insensitive,
    /// surrounding blanks ignored.
    pub fn from_name(s: &str) -> Option<Policy> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fifo" => Some(Policy::Fifo),
            "newest-first" | "newest" => Some(Policy::NewestFirst),
            "fair" => Some(Policy::Fair),
            _ => None,
        }
    }
}
