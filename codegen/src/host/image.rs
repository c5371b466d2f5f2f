//! A compiled kernel's machine code as the disk cache stores it: the
//! bytes, their alignment and each relocation by symbol name, so a later
//! process can relink them against its own addresses of tilejit's helper
//! functions (`cranelift_module::Module::define_function_bytes`).
//!
//! Only code whose relocations all name imported functions is imaged; a
//! libcall or any other target keeps that kernel in memory only.

use crate::error::{CodegenError, ImageError};
use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::ir::Function;
use cranelift_codegen::Final;
use cranelift_codegen::MachBufferFinalized;
use cranelift_module::{FuncId, Module, ModuleReloc, ModuleRelocTarget};

/// The relocation kinds an image may hold, by index.
const KINDS: [Reloc; 6] = [
    Reloc::Abs4,
    Reloc::Abs8,
    Reloc::X86PCRel4,
    Reloc::X86CallPCRel4,
    Reloc::X86CallPLTRel4,
    Reloc::Arm64Call,
];

/// Relinkable machine code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeImage {
    /// The code.
    pub bytes: Vec<u8>,
    /// Its alignment.
    pub align: u64,
    /// Where it refers to imported functions.
    pub relocs: Vec<ImageReloc>,
}

/// One relocation: patch `offset` with `symbol`'s address (plus `addend`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageReloc {
    /// Byte offset in the code.
    pub offset: u32,
    /// Index in [`KINDS`].
    kind: u8,
    /// The imported function's symbol.
    pub symbol: String,
    /// Added to its address.
    pub addend: i64,
}

impl ImageReloc {
    /// The Cranelift relocation kind.
    pub(crate) fn kind(&self) -> Reloc {
        KINDS[self.kind as usize]
    }

    /// Bytes the relocation patches.
    fn width(&self) -> usize {
        if self.kind() == Reloc::Abs8 {
            8
        } else {
            4
        }
    }
}

impl CodeImage {
    /// The image of a function `module` just defined from `func`, or
    /// `None` if a relocation is not a plain import of a known kind.
    pub(crate) fn capture(
        module: &impl Module,
        func: &Function,
        id: FuncId,
        buffer: &MachBufferFinalized<Final>,
    ) -> Option<CodeImage> {
        let mut relocs = Vec::new();
        for r in buffer.relocs() {
            let r = ModuleReloc::from_mach_reloc(r, func, id);
            let ModuleRelocTarget::User {
                namespace: 0,
                index,
            } = r.name
            else {
                return None;
            };
            let decl = module
                .declarations()
                .get_function_decl(FuncId::from_u32(index));
            relocs.push(ImageReloc {
                offset: r.offset,
                kind: KINDS.iter().position(|k| *k == r.kind)? as u8,
                symbol: decl.name.clone()?,
                addend: r.addend,
            });
        }
        Some(CodeImage {
            bytes: buffer.data().to_vec(),
            align: u64::from(buffer.alignment),
            relocs,
        })
    }

    /// The image as bytes (little endian: u64 align, u32 len code,
    /// u32 n { u32 offset, u8 kind, u32 len symbol, i64 addend }).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len() + 16 + 24 * self.relocs.len());
        out.extend(self.align.to_le_bytes());
        out.extend((self.bytes.len() as u32).to_le_bytes());
        out.extend(&self.bytes);
        out.extend((self.relocs.len() as u32).to_le_bytes());
        for r in &self.relocs {
            out.extend(r.offset.to_le_bytes());
            out.push(r.kind);
            out.extend((r.symbol.len() as u32).to_le_bytes());
            out.extend(r.symbol.as_bytes());
            out.extend(r.addend.to_le_bytes());
        }
        out
    }

    /// Parses [`CodeImage::to_bytes`]; any flaw (including a relocation
    /// outside the code or an alignment that is not a power of two) is an
    /// `Err` naming it ([`CodegenError::Image`]), never a panic.
    pub fn from_bytes(bytes: &[u8]) -> Result<CodeImage, CodegenError> {
        let mut pos = 0usize;
        let mut take = |n: usize| -> Result<&[u8], ImageError> {
            let end = pos
                .checked_add(n)
                .filter(|&e| e <= bytes.len())
                .ok_or(ImageError::Truncated { at: pos })?;
            let s = &bytes[pos..end];
            pos = end;
            Ok(s)
        };
        let u32_at = |s: &[u8]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        let u64_at = |s: &[u8]| {
            let mut b = [0; 8];
            b.copy_from_slice(s);
            u64::from_le_bytes(b)
        };
        let align = u64_at(take(8)?);
        if !align.is_power_of_two() || align > 4096 {
            return Err(ImageError::Alignment { align }.into());
        }
        let len = u32_at(take(4)?) as usize;
        let code = take(len)?.to_vec();
        let n = u32_at(take(4)?) as usize;
        let mut relocs = Vec::new();
        for _ in 0..n {
            let offset = u32_at(take(4)?);
            let kind = take(1)?[0];
            if kind as usize >= KINDS.len() {
                return Err(ImageError::RelocKind { kind }.into());
            }
            let len = u32_at(take(4)?) as usize;
            let symbol = std::str::from_utf8(take(len)?)
                .map_err(|_| ImageError::SymbolUtf8)?
                .to_string();
            let addend = u64_at(take(8)?) as i64;
            let r = ImageReloc {
                offset,
                kind,
                symbol,
                addend,
            };
            if (offset as usize).saturating_add(r.width()) > code.len() {
                return Err(ImageError::RelocOutside { offset }.into());
            }
            relocs.push(r);
        }
        if pos != bytes.len() {
            return Err(ImageError::Trailing.into());
        }
        Ok(CodeImage {
            bytes: code,
            align,
            relocs,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests assert by unwrapping
mod tests {
    use super::*;

    fn image() -> CodeImage {
        CodeImage {
            bytes: vec![0x90; 32],
            align: 16,
            relocs: vec![ImageReloc {
                offset: 8,
                kind: 1, // Abs8
                symbol: "tj_exp_x16".into(),
                addend: -4,
            }],
        }
    }

    #[test]
    fn an_image_round_trips_through_bytes() {
        let img = image();
        assert_eq!(CodeImage::from_bytes(&img.to_bytes()).unwrap(), img);
    }

    /// Every prefix and every one-byte change parses or fails with a
    /// message, never panics; relocations outside the code are refused
    /// (relinking would write out of bounds).
    #[test]
    fn damaged_images_are_errors() {
        let bytes = image().to_bytes();
        for n in 0..bytes.len() {
            assert!(CodeImage::from_bytes(&bytes[..n]).is_err(), "prefix {n}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            let _ = CodeImage::from_bytes(&b);
        }
        let mut far = image();
        far.relocs[0].offset = 28; // 8 bytes from 28 pass the end
        let err = CodeImage::from_bytes(&far.to_bytes()).unwrap_err();
        assert_eq!(
            err,
            CodegenError::Image(ImageError::RelocOutside { offset: 28 })
        );
        assert_eq!(
            err.to_string(),
            "code image: relocation at 28 outside the code"
        );
    }
}
