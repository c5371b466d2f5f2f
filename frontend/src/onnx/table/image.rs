//! ONNX rows: Image ops: resizing, transposed and 3-D convolutions, pools and rearrangements.

use super::{Kind, Row};

mod conv_nd;
mod conv_transpose;
mod crop;
mod deform_conv;
mod grid_sample;
mod pool_nd;
mod rearrange;
mod resize;
mod roi_align;
mod unpool;
mod windows;

pub(super) use conv_nd::conv_nd;
pub(super) use pool_nd::{build_pool, check_pool, Pool};
pub(super) use rearrange::pad_indexed;

/// This area's rows.
pub(super) static ROWS: &[Row] = &[
    Row {
        op: "Resize",
        attrs: &[
            "antialias",
            "axes",
            "coordinate_transformation_mode",
            "cubic_coeff_a",
            "exclude_outside",
            "extrapolation_value",
            "keep_aspect_ratio_policy",
            "mode",
            "nearest_mode",
        ],
        check: resize::check_resize,
        kind: Kind::Node(resize::build_resize),
    },
    Row {
        op: "ConvTranspose",
        attrs: &[
            "auto_pad",
            "dilations",
            "group",
            "kernel_shape",
            "output_padding",
            "output_shape",
            "pads",
            "strides",
        ],
        check: conv_transpose::check_conv_transpose,
        kind: Kind::Node(conv_transpose::build_conv_transpose),
    },
    Row {
        op: "DepthToSpace",
        attrs: &["blocksize", "mode"],
        check: rearrange::check_blocks,
        kind: Kind::Node(rearrange::build_depth_to_space),
    },
    Row {
        op: "SpaceToDepth",
        attrs: &["blocksize", "mode"],
        check: rearrange::check_blocks,
        kind: Kind::Node(rearrange::build_space_to_depth),
    },
    Row {
        op: "Upsample",
        attrs: &["mode", "scales"],
        check: resize::check_upsample,
        kind: Kind::Node(resize::build_upsample),
    },
    Row {
        op: "HannWindow",
        attrs: &["output_datatype", "periodic"],
        check: windows::check_window,
        kind: Kind::Node(windows::build_hann),
    },
    Row {
        op: "HammingWindow",
        attrs: &["output_datatype", "periodic"],
        check: windows::check_window,
        kind: Kind::Node(windows::build_hamming),
    },
    Row {
        op: "BlackmanWindow",
        attrs: &["output_datatype", "periodic"],
        check: windows::check_window,
        kind: Kind::Node(windows::build_blackman),
    },
    Row {
        op: "GridSample",
        attrs: &["align_corners", "mode", "padding_mode"],
        check: grid_sample::check_grid_sample,
        kind: Kind::Node(grid_sample::build_grid_sample),
    },
    Row {
        op: "AffineGrid",
        attrs: &["align_corners"],
        check: grid_sample::check_affine_grid,
        kind: Kind::Node(grid_sample::build_affine_grid),
    },
    Row {
        op: "CenterCropPad",
        attrs: &["axes"],
        check: super::no_check,
        kind: Kind::Node(crop::build_center_crop_pad),
    },
    Row {
        op: "Col2Im",
        attrs: &["dilations", "pads", "strides"],
        check: crop::check_col2im,
        kind: Kind::Node(crop::build_col2im),
    },
    Row {
        op: "MaxUnpool",
        attrs: &["kernel_shape", "pads", "strides"],
        check: unpool::check_max_unpool,
        kind: Kind::Node(unpool::build_max_unpool),
    },
    Row {
        op: "RoiAlign",
        attrs: &[
            "coordinate_transformation_mode",
            "mode",
            "output_height",
            "output_width",
            "sampling_ratio",
            "spatial_scale",
        ],
        check: roi_align::check_roi_align,
        kind: Kind::Node(roi_align::build_roi_align),
    },
    Row {
        op: "DeformConv",
        attrs: &[
            "dilations",
            "group",
            "kernel_shape",
            "offset_group",
            "pads",
            "strides",
        ],
        check: deform_conv::check_deform_conv,
        kind: Kind::Node(deform_conv::build_deform_conv),
    },
    Row {
        op: "LpPool",
        attrs: &[
            "auto_pad",
            "ceil_mode",
            "dilations",
            "kernel_shape",
            "p",
            "pads",
            "strides",
        ],
        check: pool_nd::check_pool,
        kind: Kind::Node(|n, cx, ins| pool_nd::build_pool(n, cx, ins, Pool::Lp)),
    },
];
