//! `tilejit::onnx` image rows (Resize, ConvTranspose, DepthToSpace,
//! SpaceToDepth, Pad's index modes, the general pools, GridSample,
//! AffineGrid, CenterCropPad, Col2Im, MaxUnpool, RoiAlign, DeformConv) on Host, Sim and Verify against
//! constants computed outside tilejit, and their bad inputs.
//!
//! Inputs are `vals(n, seed)` = f32(sin(0.37 i + seed) * 0.9). The Resize
//! constants come from onnx 1.23's `onnx.reference.ReferenceEvaluator`
//! (LINEAR_UP also matches torch's bilinear `interpolate`, align_corners =
//! False, to 6e-8); the ConvTranspose ones from torch's
//! `conv_transpose2d`. The small cases are checked by hand in comments.

use super::onnx::{close, onnx_err, vals, MODES};
use tilejit::onnx;
use tilejit::{with_mode, Error, ErrorKind, Tensor};
use tilejit_testkit::onnx::{self as b, D};

/// One node `x -> y` with initializers, at `opset`.
fn model(
    opset: i64,
    node: b::proto::NodeProto,
    x: &[i64],
    inits: Vec<b::proto::TensorProto>,
) -> onnx::OnnxModel {
    let dims: Vec<D> = x.iter().map(|&d| D::N(d)).collect();
    onnx::from_bytes(&b::encode(&b::model(
        opset,
        vec![node],
        vec![b::value("x", b::FLOAT, &dims)],
        vec![b::value("y", b::FLOAT, &[])],
        inits,
    )))
    .unwrap()
}

/// Runs the model on every mode, checking shape and values each time.
fn check_modes(m: &onnx::OnnxModel, x: &Tensor, shape: &[usize], want: &[f64]) {
    for mode in MODES {
        let outs = with_mode(mode, || m.run(&[("x", x)])).unwrap();
        let y = &outs[0].1;
        assert_eq!(y.shape(), shape, "{mode:?}");
        close(&y.to_vec::<f32>().unwrap(), want);
    }
}

fn load_err(opset: i64, node: b::proto::NodeProto, inits: Vec<b::proto::TensorProto>) -> Error {
    let bytes = b::encode(&b::model(
        opset,
        vec![node],
        vec![b::value(
            "x",
            b::FLOAT,
            &[D::N(1), D::N(1), D::N(4), D::N(4)],
        )],
        vec![b::value("y", b::FLOAT, &[])],
        inits,
    ));
    onnx::from_bytes(&bytes).err().expect("load must fail")
}

fn image(n: usize, seed: f64, shape: &[usize]) -> Tensor {
    Tensor::from_vec(vals(n, seed), shape).unwrap()
}

const LINEAR_UP: [f64; 64] = [
    0.4314829707145691,
    0.49558624625205994,
    0.6237927675247192,
    0.7287234663963318,
    0.8103781938552856,
    0.8632313013076782,
    0.8872827291488647,
    0.899308443069458,
    0.5300357341766357,
    0.5665277242660522,
    0.6395115852355957,
    0.6896220445632935,
    0.7168589234352112,
    0.719379186630249,
    0.6971827149391174,
    0.686084508895874,
    0.7271413803100586,
    0.7084106206893921,
    0.6709492206573486,
    0.611419141292572,
    0.5298203229904175,
    0.43167489767074585,
    0.31698277592658997,
    0.25963670015335083,
    0.5488333702087402,
    0.4959500730037689,
    0.3901835083961487,
    0.2730039060115814,
    0.14441132545471191,
    0.013107922859489918,
    -0.1209062710404396,
    -0.18791337311267853,
    -0.004888154566287994,
    -0.07085397094488144,
    -0.20278559625148773,
    -0.32562366127967834,
    -0.43936818838119507,
    -0.536321759223938,
    -0.6164844036102295,
    -0.6565656661987305,
    -0.430508553981781,
    -0.47659051418304443,
    -0.5687544345855713,
    -0.6401145458221436,
    -0.690670907497406,
    -0.7170021533966064,
    -0.7191082835197449,
    -0.7201613783836365,
    -0.7280278205871582,
    -0.7212595343589783,
    -0.7077230215072632,
    -0.670468807220459,
    -0.6094967722892761,
    -0.5289332270622253,
    -0.4287780523300171,
    -0.37870046496391296,
    -0.8767874240875244,
    -0.8435940742492676,
    -0.7772073149681091,
    -0.6856458783149719,
    -0.568909764289856,
    -0.4348987638950348,
    -0.2836129367351532,
    -0.2079700082540512,
];
const CUBIC_AA_DOWN: [f64; 9] = [
    0.6498820185661316,
    0.8174304962158203,
    0.7922608852386475,
    0.2881499230861664,
    -0.10808403789997101,
    -0.4788360595703125,
    -0.8320818543434143,
    -0.7490879893302917,
    -0.48948851227760315,
];
const CROP_AND_RESIZE: [f64; 9] = [
    0.18978145718574524,
    10.0,
    10.0,
    -0.6680284142494202,
    10.0,
    10.0,
    10.0,
    10.0,
    10.0,
];
const CT_K2_S2: [f64; 108] = [
    1.128937840461731,
    1.0990421772003174,
    1.5545060634613037,
    1.5351324081420898,
    1.8870508670806885,
    1.8808212280273438,
    1.0377682447433472,
    0.95340895652771,
    1.4253575801849365,
    1.2400391101837158,
    1.737403154373169,
    1.4762074947357178,
    2.081563949584961,
    2.0893216133117676,
    2.1117188930511475,
    2.132413864135742,
    1.9734344482421875,
    2.004265546798706,
    1.931671142578125,
    1.6299498081207275,
    1.9818682670593262,
    1.6804579496383667,
    1.8812005519866943,
    1.6208957433700562,
    1.6854267120361328,
    1.7222211360931396,
    1.2866759300231934,
    1.3244540691375732,
    0.83115154504776,
    0.864799976348877,
    1.6432931423187256,
    1.4593247175216675,
    1.3003453016281128,
    1.217612624168396,
    0.8987736105918884,
    0.9284741878509521,
    0.8857545852661133,
    0.791056752204895,
    1.032631516456604,
    0.7783012986183167,
    1.1609584093093872,
    0.7814183235168457,
    0.7105050086975098,
    0.6550016403198242,
    0.5398436188697815,
    0.34953248500823975,
    0.4173288345336914,
    0.11796766519546509,
    1.2533669471740723,
    0.7999858856201172,
    1.2973499298095703,
    0.8314909338951111,
    1.286954641342163,
    0.8716694712638855,
    0.3595423698425293,
    -0.008351624011993408,
    0.3743054270744324,
    -0.012328743934631348,
    0.45961982011795044,
    0.10657471418380737,
    1.223587989807129,
    0.9150835275650024,
    1.1158262491226196,
    0.9558572173118591,
    0.9782545566558838,
    0.9884719848632812,
    0.6039388179779053,
    0.33226555585861206,
    0.7877293229103088,
    0.6341978311538696,
    0.9861162304878235,
    0.9715061783790588,
    0.5392194986343384,
    0.5519422292709351,
    0.14028644561767578,
    0.11353898048400879,
    -0.16898715496063232,
    -0.23158466815948486,
    0.5986087322235107,
    0.6729028820991516,
    0.18007111549377441,
    0.33087801933288574,
    -0.15419167280197144,
    0.052716851234436035,
    -0.3467426300048828,
    -0.4367178678512573,
    -0.36892151832580566,
    -0.4740968942642212,
    -0.23252224922180176,
    -0.33866262435913086,
    -0.35893893241882324,
    -0.12393265962600708,
    -0.40645885467529297,
    -0.17516201734542847,
    -0.2903200387954712,
    -0.09403747320175171,
    0.0439944863319397,
    -0.04874533414840698,
    0.4232032299041748,
    0.35641586780548096,
    0.8537799715995789,
    0.8219844102859497,
    -0.026241183280944824,
    0.10846114158630371,
    0.35003578662872314,
    0.4049265384674072,
    0.787583589553833,
    0.7552335858345032,
];
const CT_K3_S2_PADS: [f64; 108] = [
    0.10075357556343079,
    0.5890119075775146,
    0.3498435914516449,
    0.9725491404533386,
    0.5515839457511902,
    0.11035242676734924,
    1.2840710878372192,
    2.300426959991455,
    1.0226073265075684,
    1.653741478919983,
    0.6227385997772217,
    0.23840761184692383,
    0.6786699891090393,
    1.3106391429901123,
    0.7139012813568115,
    1.219433307647705,
    0.652509331703186,
    0.16919279098510742,
    0.13858509063720703,
    -0.1932886838912964,
    -0.36432528495788574,
    -1.143646240234375,
    -0.8179259300231934,
    -1.1539642810821533,
    0.5028032660484314,
    0.5765697956085205,
    0.28504520654678345,
    0.11192096769809723,
    0.02870759926736355,
    0.0401146374642849,
    -0.581953763961792,
    -0.9514039158821106,
    -0.28751814365386963,
    -0.3886638283729553,
    0.045831672847270966,
    0.03936789557337761,
    -0.04568861424922943,
    -0.41454291343688965,
    -0.20288681983947754,
    -0.6427215933799744,
    -0.33262524008750916,
    0.1239992007613182,
    -1.223745346069336,
    -2.099534034729004,
    -0.8892965912818909,
    -1.324737548828125,
    -0.4344857931137085,
    -0.026772618293762207,
    -0.41734442114830017,
    -0.8190014958381653,
    -0.4455779492855072,
    -0.7432441115379333,
    -0.41350463032722473,
    0.09005990624427795,
    0.07913064956665039,
    0.6336150765419006,
    0.5820371508598328,
    1.552116870880127,
    1.0061676502227783,
    1.2671440839767456,
    -0.3254653811454773,
    -0.3138139247894287,
    -0.19337593019008636,
    -0.01826252043247223,
    -0.03511393815279007,
    -0.04390687867999077,
    0.7309043407440186,
    1.1435933113098145,
    0.36876803636550903,
    0.44132739305496216,
    -0.043279197067022324,
    -0.0339435376226902,
    -0.01099337637424469,
    0.2254023402929306,
    0.04874936491250992,
    0.29014652967453003,
    0.10189412534236908,
    -0.3539622128009796,
    1.1201082468032837,
    1.8243335485458374,
    0.7245113849639893,
    0.948847770690918,
    0.23085546493530273,
    -0.18580985069274902,
    0.14124798774719238,
    0.29837721586227417,
    0.16148458421230316,
    0.24074971675872803,
    0.15986500680446625,
    -0.34612518548965454,
    -0.2940458059310913,
    -1.0515162944793701,
    -0.7791492342948914,
    -1.9056541919708252,
    -1.1587985754013062,
    -1.3354765176773071,
    0.13660845160484314,
    0.03995135426521301,
    0.09486258774995804,
    -0.0760422945022583,
    0.04027751088142395,
    0.04614514485001564,
    -0.853986382484436,
    -1.2953081130981445,
    -0.4369663596153259,
    -0.478371262550354,
    0.03919496759772301,
    0.027317840605974197,
];

#[test]
fn resize_linear_upsample_matches_torch_bilinear() {
    let node = b::node(
        "Resize",
        "r",
        &["x", "", "s"],
        &["y"],
        vec![b::string("mode", "linear")],
    );
    let m = model(
        19,
        node,
        &[1, 1, 4, 4],
        vec![b::f32s("s", &[4], &[1.0, 1.0, 2.0, 2.0])],
    );
    check_modes(
        &m,
        &image(16, 0.5, &[1, 1, 4, 4]),
        &[1, 1, 8, 8],
        &LINEAR_UP,
    );
}

#[test]
fn resize_nearest_by_sizes_on_given_axes() {
    // [0 1 2] to 7 wide, asymmetric floor: source floor(o * 3/7) =
    // 0 0 0 1 1 2 2; the height (2) is not on `axes`, so it is kept.
    let node = b::node(
        "Resize",
        "r",
        &["x", "", "", "sz"],
        &["y"],
        vec![
            b::ints("axes", &[3]),
            b::string("coordinate_transformation_mode", "asymmetric"),
            b::string("nearest_mode", "floor"),
        ],
    );
    let m = model(19, node, &[1, 1, 2, 3], vec![b::i64s("sz", &[1], &[7])]);
    let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 10.0, 11.0, 12.0], &[1, 1, 2, 3]).unwrap();
    let want = [
        0., 0., 0., 1., 1., 2., 2., 10., 10., 10., 11., 11., 12., 12.,
    ];
    check_modes(&m, &x, &[1, 1, 2, 7], &want);
}

#[test]
fn resize_cubic_antialias_and_crop_and_resize_match_the_onnx_reference() {
    let x = image(16, 0.5, &[1, 1, 4, 4]);
    let node = b::node(
        "Resize",
        "r",
        &["x", "", "", "sz"],
        &["y"],
        vec![
            b::string("mode", "cubic"),
            b::int("antialias", 1),
            b::ints("axes", &[2, 3]),
        ],
    );
    let m = model(19, node, &[1, 1, 4, 4], vec![b::i64s("sz", &[2], &[3, 3])]);
    check_modes(&m, &x, &[1, 1, 3, 3], &CUBIC_AA_DOWN);

    let node = b::node(
        "Resize",
        "r",
        &["x", "roi", "", "sz"],
        &["y"],
        vec![
            b::string("mode", "linear"),
            b::string("coordinate_transformation_mode", "tf_crop_and_resize"),
            b::float("extrapolation_value", 10.0),
        ],
    );
    let roi = [0.0, 0.0, 0.4, 0.6, 1.0, 1.0, 1.2, 1.7];
    let inits = vec![
        b::f32s("roi", &[8], &roi),
        b::i64s("sz", &[4], &[1, 1, 3, 3]),
    ];
    let m = model(19, node, &[1, 1, 4, 4], inits);
    check_modes(&m, &x, &[1, 1, 3, 3], &CROP_AND_RESIZE);
}

#[test]
fn conv_transpose_matches_torch() {
    let x = image(18, 0.1, &[1, 2, 3, 3]);
    // Kernel = stride = 2: the U-Net upsampling, one GEMM.
    let node = b::node(
        "ConvTranspose",
        "ct",
        &["x", "w", "bias"],
        &["y"],
        vec![b::ints("strides", &[2, 2])],
    );
    let inits = vec![
        b::f32s("w", &[2, 3, 2, 2], &vals(24, 0.7)),
        b::f32s("bias", &[3], &vals(3, 1.3)),
    ];
    let m = model(19, node, &[1, 2, 3, 3], inits);
    check_modes(&m, &x, &[1, 3, 6, 6], &CT_K2_S2);

    // Overlapping taps, pads and output_padding: the spread convolution.
    let node = b::node(
        "ConvTranspose",
        "ct",
        &["x", "w"],
        &["y"],
        vec![
            b::ints("strides", &[2, 2]),
            b::ints("pads", &[1, 1, 1, 1]),
            b::ints("output_padding", &[1, 1]),
        ],
    );
    let m = model(
        19,
        node,
        &[1, 2, 3, 3],
        vec![b::f32s("w", &[2, 3, 3, 3], &vals(54, 0.9))],
    );
    check_modes(&m, &x, &[1, 3, 6, 6], &CT_K3_S2_PADS);
}

/// ONNX Conv with asymmetric `pads` (top 1, left 0, bottom 2, right 1),
/// per-axis strides and dilations and two groups, and an `auto_pad`
/// SAME_UPPER depthwise one (its extra zero on the bottom and right): on
/// every backend, Sim's cube included, against the definition computed
/// here (`y[o, r, q] = sum x[g*cg + c, r*sh + i*dh - top, q*sw + j*dw -
/// left] * w[o, c, i, j]`, zero outside the image).
#[test]
fn conv_with_asymmetric_pads_groups_and_dilation_matches_the_definition() {
    #[allow(clippy::too_many_arguments)]
    fn conv(
        x: &[f32],
        [c, h, wd]: [usize; 3],
        w: &[f32],
        [o, kh, kw]: [usize; 3],
        (sh, sw): (usize, usize),
        (dh, dw): (usize, usize),
        [top, left, bottom, right]: [usize; 4],
        groups: usize,
    ) -> (Vec<usize>, Vec<f64>) {
        let oh = (h + top + bottom - (kh - 1) * dh - 1) / sh + 1;
        let ow = (wd + left + right - (kw - 1) * dw - 1) / sw + 1;
        let (cg, og) = (c / groups, o / groups);
        let mut y = Vec::new();
        for f in 0..o {
            for r in 0..oh {
                for q in 0..ow {
                    let mut acc = 0.0f64;
                    for cj in 0..cg {
                        let ci = f / og * cg + cj;
                        for i in 0..kh {
                            for j in 0..kw {
                                let (iy, ix) = (r * sh + i * dh, q * sw + j * dw);
                                if iy < top || ix < left || iy - top >= h || ix - left >= wd {
                                    continue;
                                }
                                let xv = x[(ci * h + iy - top) * wd + ix - left];
                                let wv = w[((f * cg + cj) * kh + i) * kw + j];
                                acc += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    y.push(acc);
                }
            }
        }
        (vec![1, o, oh, ow], y)
    }
    let xv = vals(4 * 6 * 7, 0.2);
    let x = Tensor::from_vec(xv.clone(), &[1, 4, 6, 7]).unwrap();
    let wv = vals(4 * 2 * 2 * 3, 0.5);
    let node = b::node(
        "Conv",
        "conv",
        &["x", "w"],
        &["y"],
        vec![
            b::ints("pads", &[1, 0, 2, 1]),
            b::ints("strides", &[2, 1]),
            b::ints("dilations", &[1, 2]),
            b::int("group", 2),
        ],
    );
    let m = model(
        11,
        node,
        &[1, 4, 6, 7],
        vec![b::f32s("w", &[4, 2, 2, 3], &wv)],
    );
    let (shape, want) = conv(
        &xv,
        [4, 6, 7],
        &wv,
        [4, 2, 3],
        (2, 1),
        (1, 2),
        [1, 0, 2, 1],
        2,
    );
    assert_eq!(shape, [1, 4, 4, 4]);
    check_modes(&m, &x, &shape, &want);
    // SAME_UPPER, a 2x2 window of stride 1 over 4 channels: the one
    // padding row and column go after the image.
    let wv = vals(4 * 2 * 2, 0.9);
    let node = b::node(
        "Conv",
        "conv",
        &["x", "w"],
        &["y"],
        vec![
            b::string("auto_pad", "SAME_UPPER"),
            b::ints("kernel_shape", &[2, 2]),
            b::int("group", 4),
        ],
    );
    let m = model(
        11,
        node,
        &[1, 4, 6, 7],
        vec![b::f32s("w", &[4, 1, 2, 2], &wv)],
    );
    let (shape, want) = conv(
        &xv,
        [4, 6, 7],
        &wv,
        [4, 2, 2],
        (1, 1),
        (1, 1),
        [0, 0, 1, 1],
        4,
    );
    assert_eq!(shape, [1, 4, 6, 7]);
    check_modes(&m, &x, &shape, &want);
}

#[test]
fn depth_space_round_trip_and_pad_modes() {
    // DCR DepthToSpace of 4 one-pixel channels [a b c d] is the 2x2 block
    // [[a b] [c d]]; SpaceToDepth (DCR) takes it back.
    let node = b::node(
        "DepthToSpace",
        "d",
        &["x"],
        &["y"],
        vec![b::int("blocksize", 2)],
    );
    let m = model(13, node, &[1, 4, 1, 1], vec![]);
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 4, 1, 1]).unwrap();
    check_modes(&m, &x, &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let node = b::node(
        "SpaceToDepth",
        "s",
        &["x"],
        &["y"],
        vec![b::int("blocksize", 2)],
    );
    let m = model(13, node, &[1, 1, 2, 2], vec![]);
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2]).unwrap();
    check_modes(&m, &x, &[1, 4, 1, 1], &[1.0, 2.0, 3.0, 4.0]);

    // [1 2 3] padded (2, 2) on its last axis.
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 1, 1, 3]).unwrap();
    for (mode, want) in [
        ("edge", [1., 1., 1., 2., 3., 3., 3.]),
        ("reflect", [3., 2., 1., 2., 3., 2., 1.]),
        ("wrap", [2., 3., 1., 2., 3., 1., 2.]),
    ] {
        let m = pad_last_axis(mode, (2, 2), 3);
        check_modes(&m, &x, &[1, 1, 1, 7], &want);
    }
}

/// A Pad (opset 13) of `mode` by `(begin, end)` on the last axis of a
/// `[1, 1, 1, len]` input.
fn pad_last_axis(mode: &str, (pb, pe): (i64, i64), len: i64) -> onnx::OnnxModel {
    let attrs = vec![b::string("mode", mode)];
    let node = b::node("Pad", "p", &["x", "pads"], &["y"], attrs);
    let pads = b::i64s("pads", &[8], &[0, 0, 0, pb, 0, 0, 0, pe]);
    model(13, node, &[1, 1, 1, len], vec![pads])
}

#[test]
fn pads_of_long_axes_compute_their_index_lines() {
    // 5000 values padded (3, 4): 5007 positions, each source index
    // computed in the graph from an index line of about sqrt(5007)
    // constants. Expected values by each mode's definition, element by
    // element.
    let n = 5000usize;
    let xv: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    let x = Tensor::from_vec(xv.clone(), &[1, 1, 1, n]).expect("x");
    let (pb, pe) = (3i64, 4i64);
    let len = n as i64;
    for mode in ["edge", "reflect", "wrap"] {
        let want: Vec<f64> = (0..len + pb + pe)
            .map(|o| {
                let i = o - pb;
                let src = match mode {
                    "edge" => i.clamp(0, len - 1),
                    "wrap" => i.rem_euclid(len),
                    _ if i < 0 => -i,
                    _ if i >= len => 2 * (len - 1) - i,
                    _ => i,
                };
                xv[src as usize] as f64
            })
            .collect();
        let m = pad_last_axis(mode, (pb, pe), n as i64);
        check_modes(&m, &x, &[1, 1, 1, n + 7], &want);
    }
}

#[test]
fn bad_image_nodes_fail_at_load_naming_the_attribute() {
    let resize = |attrs| b::node("Resize", "r", &["x", "", "s"], &["y"], attrs);
    let s = || vec![b::f32s("s", &[4], &[1.0, 1.0, 2.0, 2.0])];
    let e = load_err(19, resize(vec![b::string("mode", "bicubic")]), s());
    assert_eq!(
        onnx_err(&e),
        ("r", "Resize", "mode", ErrorKind::Unsupported)
    );
    let e = load_err(
        19,
        resize(vec![b::string("coordinate_transformation_mode", "center")]),
        s(),
    );
    assert_eq!(onnx_err(&e).2, "coordinate_transformation_mode");
    let e = load_err(19, resize(vec![b::int("antialias", 1)]), s());
    assert_eq!(
        onnx_err(&e),
        ("r", "Resize", "antialias", ErrorKind::BadArgument)
    );
    let e = load_err(19, resize(vec![b::int("bogus", 1)]), s());
    assert_eq!(
        onnx_err(&e),
        ("r", "Resize", "bogus", ErrorKind::Unsupported)
    );

    let ct = b::node(
        "ConvTranspose",
        "ct",
        &["x", "w"],
        &["y"],
        vec![b::ints("kernel_shape", &[1, 1, 1, 1])],
    );
    let e = load_err(19, ct, vec![b::f32s("w", &[1, 1, 1, 1, 1, 1], &[1.0])]);
    assert_eq!(
        onnx_err(&e),
        (
            "ct",
            "ConvTranspose",
            "kernel_shape",
            ErrorKind::Unsupported
        )
    );
    let d2s = b::node(
        "DepthToSpace",
        "d",
        &["x"],
        &["y"],
        vec![b::int("blocksize", 2), b::string("mode", "XYZ")],
    );
    let e = load_err(13, d2s, vec![]);
    assert_eq!(
        onnx_err(&e),
        ("d", "DepthToSpace", "mode", ErrorKind::Unsupported)
    );
    let s2d = b::node("SpaceToDepth", "s", &["x"], &["y"], vec![]);
    assert_eq!(onnx_err(&load_err(13, s2d, vec![])).2, "blocksize");
}

#[test]
fn bad_image_values_are_errors_naming_the_node() {
    // Scales for 2 axes on a rank-4 image, found at trace time.
    let node = b::node("Resize", "r", &["x", "", "s"], &["y"], vec![]);
    let m = model(
        19,
        node,
        &[1, 1, 4, 4],
        vec![b::f32s("s", &[2], &[2.0, 2.0])],
    );
    let x = image(16, 0.5, &[1, 1, 4, 4]);
    let e = m.run(&[("x", &x)]).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        ("r", "Resize", "scales", ErrorKind::BadArgument)
    );
    // Reflecting by more than the axis holds.
    let node = b::node(
        "Pad",
        "p",
        &["x", "pads"],
        &["y"],
        vec![b::string("mode", "reflect")],
    );
    let pads = b::i64s("pads", &[8], &[0, 0, 0, 4, 0, 0, 0, 0]);
    let m = model(13, node, &[1, 1, 4, 4], vec![pads]);
    let e = m.run(&[("x", &x)]).err().unwrap();
    assert_eq!(onnx_err(&e), ("p", "Pad", "pads", ErrorKind::BadArgument));
    // Blocks that do not divide the image.
    let node = b::node(
        "SpaceToDepth",
        "s",
        &["x"],
        &["y"],
        vec![b::int("blocksize", 3)],
    );
    let m = model(13, node, &[1, 1, 4, 4], vec![]);
    let e = m.run(&[("x", &x)]).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        ("s", "SpaceToDepth", "blocksize", ErrorKind::Shape)
    );
    // ConvTranspose over an empty image (the fuzzer's: its length
    // subtracted 1 from 0), and strides whose output length overflows.
    let ct = |strides: &[i64]| {
        b::node(
            "ConvTranspose",
            "ct",
            &["x", "w"],
            &["y"],
            vec![b::ints("strides", strides)],
        )
    };
    let w = || vec![b::f32s("w", &[1, 1, 2, 2], &vals(4, 0.3))];
    let m = model(19, ct(&[1, 1]), &[1, 1, 4, 0], w());
    let empty = Tensor::zeros(&[1, 1, 4, 0], tilejit::DType::F32);
    let e = m.run(&[("x", &empty)]).err().unwrap();
    assert_eq!(onnx_err(&e), ("ct", "ConvTranspose", "X", ErrorKind::Shape));
    let m = model(19, ct(&[1, i64::MAX / 2]), &[1, 1, 4, 4], w());
    let e = m.run(&[("x", &x)]).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        ("ct", "ConvTranspose", "strides", ErrorKind::BadArgument)
    );
    // Pads that ask for a window past the size limits, on the one-GEMM
    // path (kernel = stride) and on the spread path (as the fuzzer's,
    // seed 101: the crop of the first axis failed, and the second axis's
    // indexed the failed tensor's missing axes).
    let far = -(1i64 << 62);
    for (strides, dil) in [([2, 2], [1, 1]), ([2, 2], [2, 1])] {
        let node = b::node(
            "ConvTranspose",
            "ct",
            &["x", "w"],
            &["y"],
            vec![
                b::ints("strides", &strides),
                b::ints("dilations", &dil),
                b::ints("pads", &[far, 0, 0, 0]),
            ],
        );
        let m = model(19, node, &[1, 1, 4, 4], w());
        for mode in MODES {
            let e = with_mode(mode, || m.run(&[("x", &x)]))
                .expect_err("a window of 2^62 rows is an error");
            assert!(
                !matches!(e.kind(), ErrorKind::Panic | ErrorKind::Internal),
                "{mode:?} {strides:?} {dil:?}: {e}"
            );
            assert!(e.to_string().contains("`ct`"), "{e}");
        }
    }
}

/// The error of loading or running one node `x -> y` (x `x_dims`,
/// random values) with initializers, on every mode: never a panic or an
/// internal error, and it names the node.
fn node_err(
    node: b::proto::NodeProto,
    x_dims: &[i64],
    inits: Vec<b::proto::TensorProto>,
) -> ErrorKind {
    let name = node.name.clone();
    let dims: Vec<D> = x_dims.iter().map(|&d| D::N(d)).collect();
    let bytes = b::encode(&b::model(
        19,
        vec![node],
        vec![b::value("x", b::FLOAT, &dims)],
        vec![b::value("y", b::FLOAT, &[])],
        inits,
    ));
    let shape: Vec<usize> = x_dims.iter().map(|&d| d as usize).collect();
    let numel = shape.iter().product();
    let x = image(numel, 0.4, &shape);
    let mut kinds = Vec::new();
    for mode in MODES {
        let e = match onnx::from_bytes(&bytes) {
            Err(e) => e,
            Ok(m) => with_mode(mode, || m.run(&[("x", &x)]))
                .err()
                .unwrap_or_else(|| panic!("{name} on {mode:?}: ran")),
        };
        assert!(
            !matches!(e.kind(), ErrorKind::Panic | ErrorKind::Internal),
            "{name} on {mode:?}: {e}"
        );
        assert!(e.to_string().contains(&format!("`{name}`")), "{e}");
        kinds.push(e.kind());
    }
    kinds.dedup();
    assert_eq!(kinds.len(), 1, "{name}: one error on every mode");
    kinds[0]
}

/// Nodes that trace a step per unit of a count the file sets (a window's
/// taps, MaxPool's window positions with indices, a 3-D kernel's depth, antialiasing taps, LRN's channel taps,
/// CumProd's products, STFT's frames, DeformConv's groups), one past the 2^16 steps the
/// importer unrolls: each an E4 naming the node, at once, where each
/// traced for minutes before. A Split with more pieces than outputs is a
/// bad argument.
#[test]
fn unrolling_past_the_limit_is_unsupported() {
    let over = (1i64 << 16) + 1;
    let unsupported = |node, x: &[i64], inits| {
        assert_eq!(node_err(node, x, inits), ErrorKind::Unsupported);
    };
    let attrs = vec![
        b::ints("kernel_shape", &[over]),
        b::ints("pads", &[1 << 16, 1 << 16]),
    ];
    unsupported(
        b::node("LpPool", "p", &["x"], &["y"], attrs),
        &[1, 1, 2],
        vec![],
    );
    // MaxPool with indices: 300 + 300 taps by axis, but 90,000 window
    // positions, one traced slice each.
    let attrs = vec![b::ints("kernel_shape", &[300, 300])];
    unsupported(
        b::node("MaxPool", "mp", &["x"], &["y", "i"], attrs),
        &[1, 1, 300, 300],
        vec![],
    );
    let w = vec![b::f32s("w", &[1, 1, over, 1, 1], &vals(over as usize, 0.2))];
    unsupported(
        b::node("Conv", "c", &["x", "w"], &["y"], vec![]),
        &[1, 1, over, 1, 1],
        w,
    );
    let attrs = vec![b::int("antialias", 1), b::string("mode", "linear")];
    unsupported(
        b::node("Resize", "r", &["x", "", "", "s"], &["y"], attrs),
        &[1, 1, 1, 1 << 18],
        vec![b::i64s("s", &[4], &[1, 1, 1, 1])],
    );
    let attrs = vec![b::int("size", 2 * over + 1)];
    unsupported(
        b::node("LRN", "l", &["x"], &["y"], attrs),
        &[1, over, 1, 1],
        vec![],
    );
    unsupported(
        b::node("CumProd", "cp", &["x", "a"], &["y"], vec![]),
        &[over],
        vec![b::i64s("a", &[], &[0])],
    );
    unsupported(
        b::node("STFT", "st", &["x", "step", "", "len"], &["y"], vec![]),
        &[1, over, 1],
        vec![b::i64s("step", &[], &[1]), b::i64s("len", &[], &[1])],
    );
    // DeformConv: one traced product per group.
    let attrs = vec![b::int("group", over)];
    let deform = b::node("DeformConv", "dc", &["x", "w", "off"], &["y"], attrs);
    let inits = vec![
        b::f32s("w", &[over, 1, 1, 1], &vals(over as usize, 0.3)),
        b::f32s("off", &[1, 2, 1, 1], &[0.0; 2]),
    ];
    unsupported(deform, &[1, over, 1, 1], inits);
    let attrs = vec![b::int("axis", 0), b::int("num_outputs", 3)];
    assert_eq!(
        node_err(b::node("Split", "sp", &["x"], &["y"], attrs), &[6], vec![]),
        ErrorKind::BadArgument
    );
}

/// Image nodes whose own ops fail (channels that disagree, a window past
/// the image, a pad past the size limits) or whose file numbers overflow
/// the shape arithmetic: each is an error naming the node. All but the
/// N-D pool's dilation panicked before (an error tensor's missing axes
/// indexed, or an overflow); the first is the fuzzer's (onnx, seed 103).
#[test]
fn failed_intermediates_and_overflowing_numbers_are_errors() {
    let w = |dims: &[i64]| {
        let n = dims.iter().product::<i64>() as usize;
        vec![b::f32s("w", dims, &vals(n, 0.2))]
    };
    let conv = |attrs| b::node("Conv", "c", &["x", "w"], &["y"], attrs);
    // 1-D: a kernel longer than the input; channels that disagree.
    node_err(conv(vec![]), &[1, 1, 3], w(&[1, 1, 5]));
    node_err(conv(vec![]), &[1, 2, 3], w(&[1, 3, 3]));
    // 3-D: channels that disagree; a dilation whose span overflows; a
    // pad past the size limits.
    node_err(conv(vec![]), &[1, 2, 3, 3, 3], w(&[1, 3, 1, 1, 1]));
    let dil = vec![b::ints("dilations", &[1 << 62, 1, 1])];
    node_err(conv(dil), &[1, 1, 3, 3, 3], w(&[1, 1, 5, 1, 1]));
    let huge = 1i64 << 61;
    let pads = vec![b::ints("pads", &[huge, 0, 0, huge, 0, 0])];
    node_err(conv(pads), &[1, 1, 3, 3, 3], w(&[1, 1, 1, 1, 1]));
    // SAME padding over a huge dilation.
    let same = vec![
        b::string("auto_pad", "SAME_UPPER"),
        b::ints("dilations", &[1 << 62, 1]),
    ];
    node_err(conv(same), &[1, 1, 4, 4], w(&[1, 1, 5, 1]));
    // 1-D pools: a window longer than the input.
    for op in ["MaxPool", "AveragePool"] {
        let k = vec![b::ints("kernel_shape", &[5])];
        node_err(b::node(op, "p", &["x"], &["y"], k), &[1, 1, 3], vec![]);
        let k = vec![b::ints("kernel_shape", &[1 << 40])];
        node_err(b::node(op, "p", &["x"], &["y"], k), &[1, 1, 3], vec![]);
    }
    // N-D pool: a dilation whose span overflows, pads that do.
    let attrs = vec![
        b::ints("kernel_shape", &[4]),
        b::ints("dilations", &[1 << 62]),
    ];
    node_err(
        b::node("MaxPool", "p", &["x"], &["y"], attrs),
        &[1, 1, 9],
        vec![],
    );
    let attrs = vec![
        b::ints("kernel_shape", &[2, 2, 2]),
        b::ints("pads", &[i64::MAX, 0, 0, i64::MAX, 0, 0]),
    ];
    node_err(
        b::node("MaxPool", "p", &["x"], &["y"], attrs),
        &[1, 1, 3, 3, 3],
        vec![],
    );
    // ConvTranspose 1-D: the last crop past the limits (pads end at
    // -2^62), and output_shape with pads at i64::MIN.
    let ct = |attrs| b::node("ConvTranspose", "ct", &["x", "w"], &["y"], attrs);
    let pads = vec![b::ints("pads", &[0, -(1 << 62)])];
    node_err(ct(pads), &[1, 1, 4], w(&[1, 1, 3]));
    let attrs = vec![
        b::ints("strides", &[2]),
        b::ints("output_shape", &[5]),
        b::ints("pads", &[i64::MIN, 0]),
    ];
    node_err(ct(attrs), &[1, 1, 4], w(&[1, 1, 3]));
    // DepthToSpace blocks of 2^32 x 2^32 channels.
    let attrs = vec![b::int("blocksize", 1 << 32)];
    let d2s = b::node("DepthToSpace", "d", &["x"], &["y"], attrs);
    node_err(d2s, &[1, 4, 2, 2], vec![]);
    // MaxUnpool: strides whose unpooled length overflows.
    let attrs = vec![
        b::ints("kernel_shape", &[2, 2]),
        b::ints("strides", &[1 << 62, 1]),
    ];
    let unpool = b::node("MaxUnpool", "u", &["x", "i"], &["y"], attrs);
    let idx = b::i64s("i", &[1, 1, 5, 2], &[0; 10]);
    node_err(unpool, &[1, 1, 5, 2], vec![idx]);
    // DeformConv: a group count whose channel product overflows.
    let attrs = vec![b::int("group", 1 << 62)];
    let deform = b::node("DeformConv", "dc", &["x", "w", "off"], &["y"], attrs);
    let off = b::f32s("off", &[1, 2, 2, 2], &[0.0; 8]);
    let mut inits = w(&[1, 4, 1, 1]);
    inits.push(off);
    node_err(deform, &[1, 4, 2, 2], inits);
}

/// A stride along an axis of one element moves nothing (ONNX's output
/// length `s * (1 - 1) + ..` does not depend on it): any stride there,
/// up to i64::MAX (the fuzzer's, seed 101, which tried to spread the
/// axis into 2^63 elements), gives what stride 1 gives.
/// The shape and values of `m`'s first output for input `x` on `mode`.
fn first_output(m: &onnx::OnnxModel, x: &Tensor, mode: tilejit::RunMode) -> (Vec<usize>, Vec<f32>) {
    let outs = with_mode(mode, || m.run(&[("x", x)])).expect("runs");
    let y = &outs[0].1;
    (y.shape().to_vec(), y.to_vec::<f32>().expect("f32"))
}

#[test]
fn conv_transpose_stride_over_one_element_changes_nothing() {
    let x = image(4, 0.5, &[1, 1, 4, 1]);
    let ct = |strides: &[i64]| {
        b::node(
            "ConvTranspose",
            "ct",
            &["x", "w"],
            &["y"],
            vec![
                b::ints("strides", strides),
                b::ints("dilations", &[2, 1]),
                b::ints("pads", &[1, 1, 1, 1]),
            ],
        )
    };
    let w = || vec![b::f32s("w", &[1, 2, 3, 3], &vals(18, 0.3))];
    let run = |strides: &[i64], mode| {
        let m = model(19, ct(strides), &[1, 1, 4, 1], w());
        first_output(&m, &x, mode)
    };
    for mode in MODES {
        let want = run(&[2, 1], mode);
        // Rows (4 - 1) * 2 + (3 - 1) * 2 + 1 - 2 = 9; columns 3 - 2 = 1.
        assert_eq!(want.0, [1, 2, 9, 1]);
        for s in [2, 1 << 40, i64::MAX] {
            assert_eq!(run(&[2, s], mode), want, "{mode:?} stride {s}");
        }
    }
}

#[test]
fn conv_strides_past_the_image_take_its_first_window() {
    // Strides [2^31, 2] overflowed the host's stride-phase kernel in a
    // fuzzed model (seed 127; its unit test is in `phases.rs`). Any row
    // stride past the padded height gives one output row, the first
    // window's: the same as a stride of 8, on every mode.
    let x = image(50, 0.5, &[1, 2, 5, 5]);
    let run = |strides: &[i64], mode| {
        let conv = b::node(
            "Conv",
            "c",
            &["x", "w", "b"],
            &["y"],
            vec![b::ints("strides", strides), b::ints("pads", &[1, 1, 1, 1])],
        );
        let w = vec![
            b::f32s("w", &[3, 2, 3, 3], &vals(54, 0.3)),
            b::f32s("b", &[3], &[0.1, -0.2, 0.3]),
        ];
        let m = model(19, conv, &[1, 2, 5, 5], w);
        first_output(&m, &x, mode)
    };
    for mode in MODES {
        let want = run(&[8, 2], mode);
        assert_eq!(want.0, [1, 3, 1, 3]);
        for s in [1 << 31, u32::MAX as i64] {
            assert_eq!(run(&[s, 2], mode), want, "{mode:?} stride {s}");
        }
    }
}

// ---- pools, GridSample, AffineGrid, CenterCropPad, Col2Im, MaxUnpool ----
//
// The constants below come from onnx 1.23's `ReferenceEvaluator` on the
// same `vals` inputs (MaxUnpool's are checked by hand).

/// One node over the given inputs (name, elem type, dims) and outputs, at
/// `opset`, with initializers.
fn model_io(
    opset: i64,
    node: b::proto::NodeProto,
    inputs: &[(&str, i32, &[i64])],
    outputs: &[&str],
    inits: Vec<b::proto::TensorProto>,
) -> onnx::OnnxModel {
    let ins = inputs
        .iter()
        .map(|(n, t, d)| {
            let dims: Vec<D> = d.iter().map(|&d| D::N(d)).collect();
            b::value(n, *t, &dims)
        })
        .collect();
    let outs = outputs.iter().map(|o| b::value(o, 0, &[])).collect();
    onnx::from_bytes(&b::encode(&b::model(opset, vec![node], ins, outs, inits))).unwrap()
}

/// Runs on every mode; output `i`'s shape and values (as f64) each time.
fn check_outputs(m: &onnx::OnnxModel, inputs: &[(&str, &Tensor)], want: &[(&[usize], &[f64])]) {
    for mode in MODES {
        let outs = with_mode(mode, || m.run(inputs)).unwrap();
        for (i, (shape, vals)) in want.iter().enumerate() {
            let y = &outs[i].1;
            assert_eq!(y.shape(), *shape, "{mode:?} output {i}");
            let got: Vec<f32> = y.cast(tilejit::DType::F32).to_vec::<f32>().unwrap();
            close(&got, vals);
        }
    }
}

const MAXPOOL_3D: [f64; 8] = [
    0.8902714252471924,
    0.888390064239502,
    0.5140771865844727,
    -0.11848807334899902,
    0.8893514275550842,
    0.8911501169204712,
    0.7429810166358948,
    0.20618613064289093,
];
const AVGPOOL_CEIL_CIP: [f64; 9] = [
    0.34381967782974243,
    0.27150586247444153,
    0.09229925274848938,
    -0.11619394272565842,
    -0.12291926890611649,
    -0.052868884056806564,
    0.35699987411499023,
    0.5159844160079956,
    0.2586479187011719,
];
const AVGPOOL_WIDE_PADS: [f64; 30] = [
    0.3322356343269348,
    0.6062355637550354,
    0.7981843948364258,
    0.8821026682853699,
    0.8946388959884644,
    0.5144051313400269,
    0.5292370915412903,
    0.47243931889533997,
    0.3516990542411804,
    0.27689775824546814,
    0.10421211272478104,
    0.06765785068273544,
    0.021946420893073082,
    -0.026735374704003334,
    -0.050992388278245926,
    -0.10714428871870041,
    -0.12798847258090973,
    -0.13151000440120697,
    -0.11723228543996811,
    -0.10573776811361313,
    -0.045156270265579224,
    0.00288691115565598,
    0.05053934454917908,
    0.09135150909423828,
    0.10927298665046692,
    0.29035261273384094,
    0.4320806860923767,
    0.5153287053108215,
    0.5288293957710266,
    0.5172958374023438,
];
const LPPOOL_P3: [f64; 6] = [
    1.0782171487808228,
    1.1176022291183472,
    1.222464680671692,
    1.1705069541931152,
    1.265371561050415,
    1.306003451347351,
];

#[test]
fn pools_in_3d_ceil_mode_dilated_and_wide_padded_match_the_reference() {
    // 3-D MaxPool, ceil mode, dilated along depth, strided in H and W.
    let node = b::node(
        "MaxPool",
        "p",
        &["x"],
        &["y"],
        vec![
            b::ints("kernel_shape", &[2, 2, 2]),
            b::ints("dilations", &[2, 1, 1]),
            b::ints("strides", &[1, 2, 2]),
            b::int("ceil_mode", 1),
        ],
    );
    let m = model(22, node, &[1, 1, 4, 4, 4], vec![]);
    check_modes(
        &m,
        &image(64, 0.3, &[1, 1, 4, 4, 4]),
        &[1, 1, 2, 2, 2],
        &MAXPOOL_3D,
    );
    let x = image(25, 0.2, &[1, 1, 5, 5]);
    // Ceil mode with uneven pads, counting the pads.
    let node = b::node(
        "AveragePool",
        "p",
        &["x"],
        &["y"],
        vec![
            b::ints("kernel_shape", &[3, 3]),
            b::ints("strides", &[2, 2]),
            b::ints("pads", &[1, 0, 0, 1]),
            b::int("ceil_mode", 1),
            b::int("count_include_pad", 1),
        ],
    );
    let m = model(22, node, &[1, 1, 5, 5], vec![]);
    check_modes(&m, &x, &[1, 1, 3, 3], &AVGPOOL_CEIL_CIP);
    // Pads wider than half the window, not counted.
    let node = b::node(
        "AveragePool",
        "p",
        &["x"],
        &["y"],
        vec![
            b::ints("kernel_shape", &[3, 2]),
            b::ints("pads", &[2, 0, 1, 1]),
        ],
    );
    let m = model(22, node, &[1, 1, 5, 5], vec![]);
    check_modes(&m, &x, &[1, 1, 6, 5], &AVGPOOL_WIDE_PADS);
    let node = b::node(
        "LpPool",
        "p",
        &["x"],
        &["y"],
        vec![
            b::ints("kernel_shape", &[2, 3]),
            b::ints("strides", &[2, 1]),
            b::int("p", 3),
        ],
    );
    let m = model(22, node, &[1, 1, 5, 5], vec![]);
    check_modes(&m, &x, &[1, 1, 2, 3], &LPPOOL_P3);
}

#[test]
fn maxpool_indices_in_column_major_order() {
    let node = b::node(
        "MaxPool",
        "p",
        &["x"],
        &["y", "i"],
        vec![
            b::ints("kernel_shape", &[2, 2]),
            b::ints("strides", &[2, 2]),
            b::int("storage_order", 1),
        ],
    );
    let m = model_io(
        22,
        node,
        &[("x", b::FLOAT, &[1, 1, 5, 5])],
        &["y", "i"],
        vec![],
    );
    let x = image(25, 0.2, &[1, 1, 5, 5]);
    let y = [
        0.7986261248588562,
        0.8695664405822754,
        -0.14621581137180328,
        0.49082109332084656,
    ];
    // Column-major over (h, w): index h + 5 w.
    check_outputs(
        &m,
        &[("x", &x)],
        &[
            (&[1, 1, 2, 2], &y),
            (&[1, 1, 2, 2], &[1.0, 15.0, 8.0, 18.0]),
        ],
    );
}

#[test]
fn grid_sample_modes_and_paddings_match_the_reference() {
    let x = image(12, 0.4, &[1, 1, 3, 4]);
    let g: Vec<f32> = vals(16, 1.1).iter().map(|v| v * 1.6).collect();
    let g = Tensor::from_vec(g, &[1, 2, 4, 2]).unwrap();
    let cases: [(&str, &str, i64, [f64; 8]); 4] = [
        (
            "linear",
            "zeros",
            0,
            [
                0.0,
                0.0,
                -0.26993680000305176,
                0.5448601841926575,
                0.0,
                0.0,
                0.25258851051330566,
                -0.34711766242980957,
            ],
        ),
        (
            "linear",
            "reflection",
            1,
            [
                -0.3462822437286377,
                -0.6207014918327332,
                -0.04844200611114502,
                0.6543323993682861,
                0.568424642086029,
                0.5959222912788391,
                0.5939314961433411,
                -0.0397513210773468,
            ],
        ),
        (
            "cubic",
            "border",
            0,
            [
                -0.8736906051635742,
                -0.8736906051635742,
                -0.3567291796207428,
                0.6167953610420227,
                0.3504765033721924,
                0.3504765033721924,
                0.45376530289649963,
                -0.3901633322238922,
            ],
        ),
        (
            "nearest",
            "reflection",
            0,
            [
                -0.8736906051635742,
                -0.8736906051635742,
                0.13591143488883972,
                0.6265217065811157,
                0.3504765033721924,
                0.3504765033721924,
                0.3504765033721924,
                -0.4995332360267639,
            ],
        ),
    ];
    for (mode, pad, align, want) in cases {
        let node = b::node(
            "GridSample",
            "gs",
            &["x", "g"],
            &["y"],
            vec![
                b::string("mode", mode),
                b::string("padding_mode", pad),
                b::int("align_corners", align),
            ],
        );
        // The grid is a graph input: the sampling runs traced.
        let m = model_io(
            22,
            node,
            &[
                ("x", b::FLOAT, &[1, 1, 3, 4]),
                ("g", b::FLOAT, &[1, 2, 4, 2]),
            ],
            &["y"],
            vec![],
        );
        check_outputs(&m, &[("x", &x), ("g", &g)], &[(&[1, 1, 2, 4], &want)]);
    }
}

#[test]
fn affine_grid_center_crop_pad_and_col2im_match_the_reference() {
    let node = b::node("AffineGrid", "a", &["t", "s"], &["y"], vec![]);
    let m = model_io(
        20,
        node,
        &[("t", b::FLOAT, &[2, 2, 3])],
        &["y"],
        vec![b::i64s("s", &[4], &[2, 1, 2, 3])],
    );
    let want = [
        0.1661520153284073,
        -0.4131176769733429,
        0.5049375295639038,
        0.18107840418815613,
        0.8437229990959167,
        0.7752744555473328,
        0.9085491299629211,
        0.372702032327652,
        1.247334599494934,
        0.9668980836868286,
        1.5861201286315918,
        1.5610941648483276,
        -0.5335471034049988,
        -0.061378080397844315,
        -0.34390032291412354,
        -0.4869168996810913,
        -0.1542535424232483,
        -0.9124557375907898,
        -0.577096700668335,
        -0.8859273791313171,
        -0.3874499201774597,
        -1.3114662170410156,
        -0.19780313968658447,
        -1.7370049953460693,
    ];
    let t = image(12, 0.6, &[2, 2, 3]);
    check_outputs(&m, &[("t", &t)], &[(&[2, 2, 3, 2], &want)]);

    // [3, 5] to [6, 2]: rows padded (1, 2), columns cropped from 1.
    let node = b::node("CenterCropPad", "c", &["x", "s"], &["y"], vec![]);
    let m = model_io(
        18,
        node,
        &[("x", b::FLOAT, &[3, 5])],
        &["y"],
        vec![b::i64s("s", &[2], &[6, 2])],
    );
    let want = [
        0.0,
        0.0,
        0.4075976610183716,
        0.6701788306236267,
        0.6590083241462708,
        0.39275917410850525,
        -0.7708301544189453,
        -0.8866599798202515,
        0.0,
        0.0,
        0.0,
        0.0,
    ];
    let x = image(15, 0.1, &[3, 5]);
    check_outputs(&m, &[("x", &x)], &[(&[6, 2], &want)]);

    let node = b::node(
        "Col2Im",
        "c",
        &["x", "i", "b"],
        &["y"],
        vec![b::ints("strides", &[1, 2]), b::ints("pads", &[0, 1, 1, 0])],
    );
    let m = model_io(
        18,
        node,
        &[("x", b::FLOAT, &[1, 8, 6])],
        &["y"],
        vec![b::i64s("i", &[2], &[3, 4]), b::i64s("b", &[2], &[2, 2])],
    );
    let want = [
        0.01943187788128853,
        0.8595907688140869,
        -0.3072611391544342,
        0.0,
        0.269020140171051,
        0.32650160789489746,
        0.10010051727294922,
        0.0,
        -0.08236724138259888,
        0.4929327964782715,
        -0.2536870241165161,
        0.0,
        -0.48291563987731934,
        -0.5969714522361755,
        -0.17559988796710968,
        0.0,
        -0.44606488943099976,
        -0.08569890260696411,
        -0.33739539980888367,
        0.0,
        -0.18306106328964233,
        -0.3927455544471741,
        -0.003950238227844238,
        0.0,
    ];
    let x = image(48, 0.9, &[1, 8, 6]);
    check_outputs(&m, &[("x", &x)], &[(&[1, 2, 3, 4], &want)]);
}

#[test]
fn max_unpool_scatters_with_the_last_write_winning() {
    let node = b::node(
        "MaxUnpool",
        "u",
        &["x", "i", "shape"],
        &["y"],
        vec![
            b::ints("kernel_shape", &[2, 2]),
            b::ints("strides", &[2, 2]),
        ],
    );
    // Indices 5, 5, 10, 15 of a 4x4 output, padded to 4x5 by output_shape:
    // position 5 takes the later value (2), 10 and 15 take 3 and 4.
    let m = model_io(
        22,
        node,
        &[
            ("x", b::FLOAT, &[1, 1, 2, 2]),
            ("i", b::INT64, &[1, 1, 2, 2]),
        ],
        &["y"],
        vec![b::i64s("shape", &[4], &[1, 1, 4, 5])],
    );
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2]).unwrap();
    let i = Tensor::from_vec(vec![5i64, 5, 10, 15], &[1, 1, 2, 2]).unwrap();
    let mut want = [0.0; 20];
    // Row-major 4x4 positions, each row then padded by one column.
    want[5 + 1] = 2.0;
    want[10 + 2] = 3.0;
    want[15 + 3] = 4.0;
    check_outputs(&m, &[("x", &x), ("i", &i)], &[(&[1, 1, 4, 5], &want)]);
}

#[test]
fn bad_pool_and_sampling_nodes_are_errors_naming_them() {
    // At load: a 4-D pool, LpPool's p = 0, an unknown GridSample mode.
    let node = b::node(
        "MaxPool",
        "p",
        &["x"],
        &["y"],
        vec![b::ints("kernel_shape", &[2, 2, 2, 2])],
    );
    let e = load_err(22, node, vec![]);
    assert_eq!(
        onnx_err(&e),
        ("p", "MaxPool", "kernel_shape", ErrorKind::Unsupported)
    );
    let node = b::node(
        "LpPool",
        "lp",
        &["x"],
        &["y"],
        vec![b::ints("kernel_shape", &[2, 2]), b::int("p", 0)],
    );
    assert_eq!(
        onnx_err(&load_err(22, node, vec![])),
        ("lp", "LpPool", "p", ErrorKind::BadArgument)
    );
    let node = b::node(
        "GridSample",
        "gs",
        &["x", "g"],
        &["y"],
        vec![b::string("mode", "area")],
    );
    let bytes = b::encode(&b::model(
        22,
        vec![node],
        vec![
            b::value("x", b::FLOAT, &[D::N(1), D::N(1), D::N(4), D::N(4)]),
            b::value("g", b::FLOAT, &[D::N(1), D::N(2), D::N(2), D::N(2)]),
        ],
        vec![b::value("y", b::FLOAT, &[])],
        vec![],
    ));
    let e = onnx::from_bytes(&bytes).err().expect("load must fail");
    assert_eq!(
        onnx_err(&e),
        ("gs", "GridSample", "mode", ErrorKind::Unsupported)
    );
    let node = b::node(
        "AffineGrid",
        "a",
        &["x", "s"],
        &["y"],
        vec![b::int("align_corners", 2)],
    );
    let e = load_err(20, node, vec![b::i64s("s", &[4], &[1, 1, 2, 2])]);
    assert_eq!(onnx_err(&e).2, "align_corners");

    let x = image(16, 0.5, &[1, 1, 4, 4]);
    let run_err = |node, inputs: &[(&str, i32, &[i64])], feeds: &[(&str, &Tensor)], inits| {
        let m = model_io(22, node, inputs, &["y"], inits);
        m.run(feeds).expect_err("must fail")
    };
    // A window larger than the padded input.
    let node = b::node(
        "AveragePool",
        "p",
        &["x"],
        &["y"],
        vec![b::ints("kernel_shape", &[5, 5]), b::int("ceil_mode", 1)],
    );
    let e = run_err(
        node,
        &[("x", b::FLOAT, &[1, 1, 4, 4])],
        &[("x", &x)],
        vec![],
    );
    assert_eq!(
        onnx_err(&e),
        ("p", "AveragePool", "kernel_shape", ErrorKind::Shape)
    );
    // A grid whose last dim is not the image's spatial rank.
    let g = Tensor::zeros(&[1, 2, 2, 3], tilejit::DType::F32);
    let node = b::node("GridSample", "gs", &["x", "g"], &["y"], vec![]);
    let e = run_err(
        node,
        &[
            ("x", b::FLOAT, &[1, 1, 4, 4]),
            ("g", b::FLOAT, &[1, 2, 2, 3]),
        ],
        &[("x", &x), ("g", &g)],
        vec![],
    );
    assert_eq!(onnx_err(&e), ("gs", "GridSample", "grid", ErrorKind::Shape));
    // theta of the wrong shape for a 2-D size.
    let t = Tensor::zeros(&[1, 3, 4], tilejit::DType::F32);
    let node = b::node("AffineGrid", "a", &["t", "s"], &["y"], vec![]);
    let e = run_err(
        node,
        &[("t", b::FLOAT, &[1, 3, 4])],
        &[("t", &t)],
        vec![b::i64s("s", &[4], &[1, 1, 2, 2])],
    );
    assert_eq!(onnx_err(&e), ("a", "AffineGrid", "theta", ErrorKind::Shape));
    // Two sizes for the default (every) axis of a rank-4 input.
    let node = b::node("CenterCropPad", "c", &["x", "s"], &["y"], vec![]);
    let e = run_err(
        node,
        &[("x", b::FLOAT, &[1, 1, 4, 4])],
        &[("x", &x)],
        vec![b::i64s("s", &[2], &[2, 2])],
    );
    assert_eq!(
        onnx_err(&e),
        ("c", "CenterCropPad", "shape", ErrorKind::Shape)
    );
    // Col2Im columns that do not make up the image's blocks.
    let cols = Tensor::zeros(&[1, 4, 5], tilejit::DType::F32);
    let node = b::node("Col2Im", "c", &["x", "i", "b"], &["y"], vec![]);
    let e = run_err(
        node,
        &[("x", b::FLOAT, &[1, 4, 5])],
        &[("x", &cols)],
        vec![b::i64s("i", &[2], &[3, 3]), b::i64s("b", &[2], &[2, 2])],
    );
    assert_eq!(onnx_err(&e), ("c", "Col2Im", "input", ErrorKind::Shape));
    // An output_shape smaller than the unpooled size.
    let node = b::node(
        "MaxUnpool",
        "u",
        &["x", "i", "shape"],
        &["y"],
        vec![
            b::ints("kernel_shape", &[2, 2]),
            b::ints("strides", &[2, 2]),
        ],
    );
    let e = run_err(
        node,
        &[
            ("x", b::FLOAT, &[1, 1, 4, 4]),
            ("i", b::INT64, &[1, 1, 4, 4]),
        ],
        &[
            ("x", &x),
            ("i", &Tensor::zeros(&[1, 1, 4, 4], tilejit::DType::I64)),
        ],
        vec![b::i64s("shape", &[4], &[1, 1, 3, 3])],
    );
    assert_eq!(
        onnx_err(&e),
        ("u", "MaxUnpool", "output_shape", ErrorKind::Shape)
    );
}

#[test]
fn roi_align_averages_and_maxes_traced_rois() {
    let x = image(60, 0.5, &[2, 1, 5, 6]);
    // The second roi starts left of the image: its outside samples weigh 0.
    let rois = Tensor::from_vec(vec![0.5f32, 0.2, 3.7, 4.1, -1.5, 1.0, 7.0, 3.0], &[2, 4]).unwrap();
    let batch = Tensor::from_vec(vec![1i64, 0], &[2]).unwrap();
    let cases: [(&str, &str, [f64; 12]); 2] = [
        (
            "avg",
            "half_pixel",
            [
                0.20421987771987915,
                0.31278783082962036,
                0.3825163245201111,
                -0.3177523612976074,
                -0.3423199951648712,
                -0.32426032423973083,
                0.16058771312236786,
                -0.06929700076580048,
                -0.49190202355384827,
                -0.2821614444255829,
                -0.4368792176246643,
                -0.010523974895477295,
            ],
        ),
        (
            "max",
            "output_half_pixel",
            [
                0.46156129240989685,
                0.44181305170059204,
                0.35565677285194397,
                0.17062552273273468,
                0.1371118575334549,
                0.30493634939193726,
                0.3222561478614807,
                0.007940350100398064,
                0.25119179487228394,
                0.3286215364933014,
                0.3576521873474121,
                0.4259340167045593,
            ],
        ),
    ];
    for (mode, coords, want) in cases {
        let node = b::node(
            "RoiAlign",
            "ra",
            &["x", "r", "b"],
            &["y"],
            vec![
                b::string("mode", mode),
                b::string("coordinate_transformation_mode", coords),
                b::int("output_height", 2),
                b::int("output_width", 3),
                b::int("sampling_ratio", 2),
                b::float("spatial_scale", 0.9),
            ],
        );
        let m = model_io(
            22,
            node,
            &[
                ("x", b::FLOAT, &[2, 1, 5, 6]),
                ("r", b::FLOAT, &[2, 4]),
                ("b", b::INT64, &[2]),
            ],
            &["y"],
            vec![],
        );
        check_outputs(
            &m,
            &[("x", &x), ("r", &rois), ("b", &batch)],
            &[(&[2, 1, 2, 3], &want)],
        );
    }
    // A sampling ratio of 0 (samples per roi size) is refused at load.
    let node = b::node("RoiAlign", "ra", &["x", "r", "b"], &["y"], vec![]);
    let bytes = b::encode(&b::model(
        22,
        vec![node],
        vec![
            b::value("x", b::FLOAT, &[D::N(2), D::N(1), D::N(5), D::N(6)]),
            b::value("r", b::FLOAT, &[D::N(2), D::N(4)]),
            b::value("b", b::INT64, &[D::N(2)]),
        ],
        vec![b::value("y", b::FLOAT, &[])],
        vec![],
    ));
    let e = onnx::from_bytes(&bytes).err().expect("load must fail");
    assert_eq!(
        onnx_err(&e),
        ("ra", "RoiAlign", "sampling_ratio", ErrorKind::Unsupported)
    );
}

const DEFORM: [f64; 32] = [
    0.916402280330658,
    1.9275059700012207,
    1.5196208953857422,
    0.36584389209747314,
    0.7672630548477173,
    0.007687658071517944,
    0.12787491083145142,
    0.2921242117881775,
    -0.030236274003982544,
    0.0903603583574295,
    0.43171221017837524,
    0.4931392967700958,
    0.17907637357711792,
    0.30941686034202576,
    0.14166858792304993,
    -0.1195685863494873,
    -1.1269474029541016,
    -2.1753134727478027,
    -1.8498742580413818,
    -0.6445303559303284,
    -0.9979387521743774,
    -0.08200398087501526,
    -0.31552720069885254,
    -0.5394691228866577,
    -0.09363406896591187,
    -0.2564118504524231,
    -0.6831128597259521,
    -0.7614210844039917,
    -0.4107479155063629,
    -0.5604042410850525,
    -0.4063228964805603,
    -0.13293468952178955,
];

#[test]
fn deform_conv_samples_at_traced_offsets() {
    // Uneven pads, a bias and a mask; offsets up to 1.35 pixels move taps
    // between pixels and past the image (where they read 0).
    let node = b::node(
        "DeformConv",
        "dc",
        &["x", "w", "o", "b", "m"],
        &["y"],
        vec![b::ints("pads", &[1, 0, 0, 1])],
    );
    let m = model_io(
        22,
        node,
        &[
            ("x", b::FLOAT, &[1, 2, 4, 4]),
            ("o", b::FLOAT, &[1, 8, 4, 4]),
            ("m", b::FLOAT, &[1, 4, 4, 4]),
        ],
        &["y"],
        vec![
            b::f32s("w", &[2, 2, 2, 2], &vals(16, 0.7)),
            b::f32s("b", &[2], &[0.25, -0.5]),
        ],
    );
    let x = image(32, 0.2, &[1, 2, 4, 4]);
    let o: Vec<f32> = vals(128, 1.3).iter().map(|v| v * 1.5).collect();
    let o = Tensor::from_vec(o, &[1, 8, 4, 4]).unwrap();
    let mk: Vec<f32> = vals(64, 0.4).iter().map(|v| v * 0.5 + 0.5).collect();
    let mk = Tensor::from_vec(mk, &[1, 4, 4, 4]).unwrap();
    check_outputs(
        &m,
        &[("x", &x), ("o", &o), ("m", &mk)],
        &[(&[1, 2, 4, 4], &DEFORM)],
    );
    // Offsets for the wrong number of taps.
    let node = b::node("DeformConv", "dc", &["x", "w", "o"], &["y"], vec![]);
    let m = model_io(
        22,
        node,
        &[
            ("x", b::FLOAT, &[1, 2, 4, 4]),
            ("o", b::FLOAT, &[1, 6, 3, 3]),
        ],
        &["y"],
        vec![b::f32s("w", &[2, 2, 2, 2], &vals(16, 0.7))],
    );
    let bad = Tensor::zeros(&[1, 6, 3, 3], tilejit::DType::F32);
    let e = m.run(&[("x", &x), ("o", &bad)]).expect_err("must fail");
    assert_eq!(onnx_err(&e), ("dc", "DeformConv", "X", ErrorKind::Shape));
}
