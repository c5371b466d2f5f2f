//! `tilejit run` and `tilejit onnx info` on small models built here with
//! `tilejit_testkit::onnx`: outputs written as `.npy` and checked against
//! hand-computed values, a symbolic dim taking the file's size, and bad
//! models and arguments ending with exit 1 or 2 and a message.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use tilejit::Tensor;
use tilejit_testkit::onnx::{self as b, D};
use tilejit_testkit::TempDir;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tilejit"))
}

/// `y = relu(x) * 2`, `x` of shape `[n]`.
fn model(op: &str) -> Vec<u8> {
    b::encode(&b::model(
        13,
        vec![
            b::node(op, "act", &["x"], &["r"], vec![]),
            b::node("Mul", "double", &["r", "two"], &["y"], vec![]),
        ],
        vec![b::value("x", b::FLOAT, &[D::S("n")])],
        vec![b::value("y", b::FLOAT, &[D::S("n")])],
        vec![b::f32s("two", &[], &[2.0])],
    ))
}

#[test]
fn run_writes_outputs_and_info_lists_ops() {
    let dir = TempDir::new("cli-onnx");
    let path = dir.join("m.onnx");
    std::fs::write(&path, model("Relu")).unwrap();
    let x = Tensor::from_vec(vec![-1.5f32, 0.5, 2.0], &[3]).unwrap();
    tilejit::io::write_npy(dir.join("x.npy"), &x).unwrap();
    for mode in ["host", "sim", "verify"] {
        let out = dir.join(format!("out-{mode}"));
        let o = bin()
            .arg("run")
            .arg(&path)
            .arg("--input")
            .arg(format!("x={}", dir.join("x.npy").display()))
            .arg("--output-dir")
            .arg(&out)
            .args(["--mode", mode])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(stdout.contains("y: f32[3]"), "{stdout}");
        let y = tilejit::io::read_npy(out.join("y.npy")).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [0.0, 1.0, 4.0]);
    }
    let o = bin().args(["onnx", "info"]).arg(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(
        stdout.contains("opset 13") && stdout.contains("x: f32[n]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Relu") && stdout.contains("0 unsupported"),
        "{stdout}"
    );
    assert!(stdout.contains("phases: 1 (one trace)"), "{stdout}");
}

#[test]
fn bad_models_and_arguments_exit_with_a_message() {
    let dir = TempDir::new("cli-onnx-bad");
    let good = dir.join("good.onnx");
    std::fs::write(&good, model("Relu")).unwrap();
    let bad = dir.join("bad.onnx");
    std::fs::write(&bad, model("Mystery")).unwrap();
    let x = dir.join("x.npy");
    tilejit::io::write_npy(&x, &Tensor::ones(&[2], tilejit::DType::F32)).unwrap();
    let xarg = format!("x={}", x.display());
    let cases: Vec<(Vec<String>, u8, &str)> = vec![
        (
            vec![
                "run".into(),
                bad.display().to_string(),
                "--input".into(),
                xarg.clone(),
            ],
            1,
            "node `act` (Mystery)",
        ),
        (vec!["run".into(), good.display().to_string()], 1, "`x`"),
        (
            vec![
                "run".into(),
                good.display().to_string(),
                "--input".into(),
                "x".into(),
            ],
            2,
            "NAME=FILE",
        ),
        (
            vec![
                "run".into(),
                good.display().to_string(),
                "--input".into(),
                xarg.clone(),
                "--mode".into(),
                "gpu".into(),
            ],
            2,
            "--mode",
        ),
        (
            vec!["run".into(), dir.join("absent.onnx").display().to_string()],
            1,
            "absent.onnx",
        ),
    ];
    for (args, code, says) in cases {
        let o = bin().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code as i32), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let o = bin().args(["onnx", "info"]).arg(&bad).output().unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("UNSUPPORTED"));
}

/// A node-test directory holding one test, `test_double` (`y = relu(x) * 2`),
/// whose expected output is off by `off` at one element.
fn node_test_dir(dir: &std::path::Path, off: f32) {
    use tilejit_testkit::onnx::protobuf::Message;
    let t = dir.join("test_double");
    let set = t.join("test_data_set_0");
    std::fs::create_dir_all(&set).unwrap();
    std::fs::write(t.join("model.onnx"), model("Relu")).unwrap();
    let pb = |v: &[f32]| b::f32s("", &[v.len() as i64], v).write_to_bytes().unwrap();
    std::fs::write(set.join("input_0.pb"), pb(&[-1.0, 0.5, 3.0])).unwrap();
    std::fs::write(set.join("output_0.pb"), pb(&[off, 1.0, 6.0])).unwrap();
}

#[test]
fn node_tests_follow_the_expect_list_and_its_per_test_atol() {
    let dir = TempDir::new("cli-node-tests");
    // 1.5e-7 off an exact 0: over the runner's atol 1e-7, under 2e-7.
    node_test_dir(&dir.join("data"), 1.5e-7);
    let run = |expect: &str| {
        let list = dir.join("expect.txt");
        std::fs::write(&list, expect).unwrap();
        let o = bin()
            .args(["onnx", "node-tests"])
            .arg(dir.join("data"))
            .arg("--expect")
            .arg(&list)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.code(), text)
    };
    let (code, text) = run("test_double\n");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAILED test_double: output y: element 0"),
        "{text}"
    );
    let (code, text) = run("test_double atol=2e-7  # why\n");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("1 passed, 0 failed"), "{text}");
    let (code, text) = run("test_double atol=1e-8\n");
    assert_eq!(code, Some(1), "{text}");
    let (code, text) = run("test_double rtol=2e-7\n");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("expect.txt:1: `rtol=2e-7`: expected `atol=NUMBER`"),
        "{text}"
    );
}
