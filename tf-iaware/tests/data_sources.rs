//! The data sources against the files Python TensorFlow and NumPy wrote
//! (tests/fixtures/make_data.py) and against real TensorFlow: every format round-trips to the
//! same rows, batches of any element type feed a session, and bad data is a typed error naming
//! the input and the file before TensorFlow sees it.

use std::io::Write;
use std::path::{Path, PathBuf};

use tf_iaware::data::{
    self, feeds, input_specs, Batch, Dataset, FeedTensor, Feeder, HostTensor, InMemory, InputSpec,
    Synthetic, Values,
};
use tf_iaware::graph::analyze::analyze_bytes;
use tf_iaware::graph::DType;
use tf_iaware::graph::Sidecar;
use tf_iaware::tensorflow::{
    DataType, Graph, Operation, Session, SessionOptions, SessionRunArgs, Tensor,
};
use tf_iaware::Error;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn spec(name: &str, dtype: DType, shape: &[i64]) -> InputSpec {
    InputSpec {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
    }
}

/// The CNN's inputs, as the graph and its sidecar give them.
fn cnn_specs() -> (tf_iaware::graph::analyze::Analyzed, Sidecar, Vec<InputSpec>) {
    let bytes = std::fs::read(fixtures().join("tf1_cnn_adam.pb")).unwrap();
    let sidecar = Sidecar::load(&fixtures().join("tf1_cnn_adam.json")).unwrap();
    let analyzed = analyze_bytes(&bytes, "tf1_cnn_adam.pb").unwrap();
    let specs = input_specs(&analyzed.op_graph, &sidecar).unwrap();
    (analyzed, sidecar, specs)
}

fn rows(d: &dyn Dataset, n: usize, specs: &[InputSpec]) -> Batch {
    d.rows(&(0..n).collect::<Vec<_>>(), specs).unwrap()
}

#[test]
fn every_format_gives_the_same_rows() {
    let (_, _, specs) = cnn_specs();
    assert_eq!(specs[0], spec("x", DType::FLOAT, &[8, 16, 16, 3]));
    assert_eq!(specs[1], spec("y", DType::FLOAT, &[8, 10]));
    let npz = data::open(&fixtures().join("data_cnn_train.npz"), &specs).unwrap();
    assert_eq!(npz.len(), 200);
    let held_out = data::open(&fixtures().join("data_cnn_held_out.npz"), &specs).unwrap();
    assert_eq!(held_out.len(), 60);
    // y is one-hot.
    let Values::F32(y) = &rows(&npz, 200, &specs).tensors["y"].values else {
        panic!("y is float")
    };
    assert!(y.chunks(10).all(|r| r.iter().sum::<f32>() == 1.0));

    // The TFRecord files hold the first 16 training rows, Examples written by TensorFlow.
    let dir = fixtures().join("data_cnn_tfrecords");
    let records = data::open(&dir, &specs).unwrap();
    assert_eq!(records.len(), 16);
    assert_eq!(rows(&records, 16, &specs), rows(&npz, 16, &specs));
    let one = data::open(&dir.join("part-1.tfrecord"), &specs).unwrap();
    assert_eq!(
        rows(&one, 8, &specs),
        npz.rows(&(8..16).collect::<Vec<_>>(), &specs).unwrap()
    );

    // The .npy holds x alone: the one input of a graph that has one.
    let x_only = [specs[0].clone()];
    let npy = data::open(&fixtures().join("data_cnn_x.npy"), &x_only).unwrap();
    assert_eq!(npy.len(), 8);
    assert_eq!(rows(&npy, 8, &x_only), rows(&npz, 8, &x_only));
}

#[test]
fn batches_from_files_train_the_python_cnn() {
    let (analyzed, sidecar, specs) = cnn_specs();
    let graph = &analyzed.import("the Python CNN").unwrap();
    let session = Session::new(&SessionOptions::new(), graph).unwrap();
    let op = |n: &str| -> Operation { graph.operation_by_name_required(n).unwrap() };
    let mut init = SessionRunArgs::new();
    init.add_target(&op(&sidecar.init));
    session.run(&mut init).unwrap();
    let train = data::open(&fixtures().join("data_cnn_train.npz"), &specs).unwrap();
    let mut feeder = Feeder::new(Box::new(train), &specs, 1).unwrap();
    for _ in 0..3 {
        let batch = feeder.take(8).unwrap();
        let tensors = feeds(&batch).unwrap();
        let inputs: Vec<Operation> = tensors.iter().map(|(n, _)| op(n)).collect();
        let mut args = SessionRunArgs::new();
        for ((_, t), o) in tensors.iter().zip(&inputs) {
            t.add_feed(&mut args, o, 0);
        }
        args.add_target(&op(&sidecar.train));
        let loss = args.request_fetch(&op(&sidecar.loss), 0);
        session.run(&mut args).unwrap();
        let loss: f32 = args.fetch::<f32>(loss).unwrap()[0];
        assert!(loss.is_finite(), "{loss}");
    }
    assert_eq!(feeder.taken(), 24);
}

/// A graph of one placeholder of `dtype` and its Identity.
fn identity(dtype: DataType) -> (Graph, Operation, Operation) {
    let mut g = Graph::new();
    let p = {
        let mut d = g.new_operation("Placeholder", "in").unwrap();
        d.set_attr_type("dtype", dtype).unwrap();
        d.finish().unwrap()
    };
    let id = {
        let mut d = g.new_operation("Identity", "out").unwrap();
        d.add_input(p.clone());
        d.set_attr_type("T", dtype).unwrap();
        d.finish().unwrap()
    };
    (g, p, id)
}

fn through_tensorflow(t: &HostTensor) -> Vec<String> {
    let dtype = match t.values {
        Values::F32(_) => DataType::Float,
        Values::F64(_) => DataType::Double,
        Values::I32(_) => DataType::Int32,
        Values::I64(_) => DataType::Int64,
        Values::U8(_) => DataType::UInt8,
        Values::Bool(_) => DataType::Bool,
        Values::Str(_) => DataType::String,
    };
    let (g, input, out) = identity(dtype);
    let session = Session::new(&SessionOptions::new(), &g).unwrap();
    let feed = FeedTensor::from_host("in", t).unwrap();
    assert_eq!(feed.dims(), &t.shape[..]);
    let mut args = SessionRunArgs::new();
    feed.add_feed(&mut args, &input, 0);
    let token = args.request_fetch(&out, 0);
    session.run(&mut args).unwrap();
    fn show<T: tf_iaware::tensorflow::TensorType + std::fmt::Debug>(
        args: &mut SessionRunArgs<'_>,
        token: tf_iaware::tensorflow::FetchToken,
    ) -> Vec<String> {
        let t: Tensor<T> = args.fetch(token).unwrap();
        t.iter().map(|v| format!("{v:?}")).collect()
    }
    match t.values {
        Values::F32(_) => show::<f32>(&mut args, token),
        Values::F64(_) => show::<f64>(&mut args, token),
        Values::I32(_) => show::<i32>(&mut args, token),
        Values::I64(_) => show::<i64>(&mut args, token),
        Values::U8(_) => show::<u8>(&mut args, token),
        Values::Bool(_) => show::<bool>(&mut args, token),
        Values::Str(_) => show::<String>(&mut args, token),
    }
}

#[test]
fn mixed_examples_and_every_dtype_feed_tensorflow() {
    let path = fixtures().join("data_mixed.tfrecord");
    let specs = [
        spec("x", DType::FLOAT, &[-1, 4]),
        spec("label", DType(9), &[-1]),
        spec("raw", DType::UINT8, &[-1, 3]),
    ];
    let d = data::open(&path, &specs).unwrap();
    assert_eq!(d.len(), 6);
    let b = rows(&d, 6, &specs);
    assert_eq!(
        b.tensors["label"].values,
        Values::I64(vec![0, 1, 2, 0, 1, 2])
    );
    assert_eq!(b.tensors["label"].shape, [6]);
    let Values::U8(raw) = &b.tensors["raw"].values else {
        panic!()
    };
    assert_eq!(raw[6..9], [2, 4, 255]);
    let Values::F32(x) = &b.tensors["x"].values else {
        panic!()
    };
    assert_eq!(x[4..8], [1.0, 1.5, -1.0, 0.25]);
    // The same labels for an int32 graph input.
    let int32 = [spec("label", DType(3), &[-1, 1])];
    let d32 = data::open(&path, &int32).unwrap();
    assert_eq!(
        rows(&d32, 2, &int32).tensors["label"].values,
        Values::I32(vec![0, 1])
    );

    // Every element type a batch carries goes through TensorFlow unchanged.
    let cases: Vec<(Values, Vec<&str>)> = vec![
        (vec![1.5f32, -2.0].into(), vec!["1.5", "-2.0"]),
        (vec![0.25f64, 3.0].into(), vec!["0.25", "3.0"]),
        (vec![7i32, -1].into(), vec!["7", "-1"]),
        (vec![1i64 << 40, 2].into(), vec!["1099511627776", "2"]),
        (vec![255u8, 0].into(), vec!["255", "0"]),
        (vec![true, false].into(), vec!["true", "false"]),
        (
            vec![b"ab".to_vec(), b"c".to_vec()].into(),
            vec!["\"ab\"", "\"c\""],
        ),
    ];
    for (values, want) in cases {
        let t = HostTensor::new(vec![2, 1], values).unwrap();
        assert_eq!(through_tensorflow(&t), want, "{t:?}");
    }
}

#[test]
fn digits_and_synthetic_sources_fit_the_graph() {
    let (_, sidecar, specs) = cnn_specs();
    let (train, test) = data::digits_split(&specs, 0.2, 7).unwrap();
    assert_eq!(train.len() + test.len(), 1797);
    train.check(&specs).unwrap();
    // Integer labels for a graph with sparse labels.
    let sparse = [specs[0].clone(), spec("y", DType(9), &[-1])];
    let (train, _) = data::digits_split(&sparse, 0.2, 7).unwrap();
    let b = rows(&train, 4, &sparse);
    assert_eq!(b.tensors["y"].shape, [4]);
    assert_eq!(b.tensors["x"].shape, [4, 16, 16, 3]);
    let synthetic = Synthetic::new(&specs, &sidecar.one_hot, 64, 3).unwrap();
    let mut feeder = Feeder::new(Box::new(synthetic), &specs, 3).unwrap();
    let step = feeder.take_step(&[5, 3]).unwrap();
    assert_eq!(step[0].tensors["x"].shape, [5, 16, 16, 3]);
    assert_eq!(step[1].tensors["y"].shape, [3, 10]);
}

/// The bytes of a `.npy` file: version 1.0 header for `descr` and `shape`, then `data`.
fn npy(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    data::encode_npy(descr, &shape, data)
}

/// A `.npz` of `arrays`, stored uncompressed as `np.savez` writes it.
fn npz(path: &Path, arrays: &[(&str, Vec<u8>)]) {
    let mut w = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in arrays {
        w.start_file(format!("{name}.npy"), stored).unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap();
}

/// The error `open` gives for `path` with `specs`, after checking it names `file`.
fn open_err(path: &Path, specs: &[InputSpec]) -> Error {
    let e = data::open(path, specs).unwrap_err();
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(e.to_string().contains(&name), "{e} should name {name}");
    e
}

#[test]
fn data_of_another_shape_or_type_or_without_an_input_is_a_typed_error_naming_it() {
    let (_, _, specs) = cnn_specs();
    let train = fixtures().join("data_cnn_train.npz");
    // Shape and element type against the graph.
    let gray = [spec("x", DType::FLOAT, &[-1, 16, 16, 1]), specs[1].clone()];
    let e = open_err(&train, &gray);
    assert!(
        matches!(&e, Error::DataShape { input, .. } if input == "x"),
        "{e}"
    );
    let sparse = [specs[0].clone(), spec("y", DType(9), &[-1])];
    let e = open_err(&train, &sparse);
    assert!(
        matches!(&e, Error::DataType { input, .. } if input == "y"),
        "{e}"
    );
    let e = open_err(
        &fixtures().join("data_cnn_tfrecords/part-0.tfrecord"),
        &sparse,
    );
    assert!(
        matches!(&e, Error::DataType { input, found, .. } if input == "y" && found == "float_list"),
        "{e}"
    );

    // A missing array or feature.
    let more = [
        specs[0].clone(),
        specs[1].clone(),
        spec("w", DType::FLOAT, &[-1]),
    ];
    let e = open_err(&train, &more);
    assert!(
        matches!(&e, Error::DataMissing { input, available, .. } if input == "w" && available == "x, y"),
        "{e}"
    );
    let e = open_err(
        &fixtures().join("data_cnn_tfrecords/part-0.tfrecord"),
        &more,
    );
    assert!(
        matches!(&e, Error::DataMissing { input, .. } if input == "w"),
        "{e}"
    );
    assert!(e.to_string().contains("record 0"), "{e}");
    let e = open_err(&fixtures().join("data_cnn_x.npy"), &specs);
    assert!(
        matches!(&e, Error::DataMissing { input, .. } if input == "y"),
        "{e}"
    );
}

#[test]
fn truncated_corrupt_and_empty_files_are_typed_errors_naming_them() {
    let (_, _, specs) = cnn_specs();
    let dir = tempfile::tempdir().unwrap();
    let train = fixtures().join("data_cnn_train.npz");
    // Truncated files.
    let part = std::fs::read(fixtures().join("data_cnn_tfrecords/part-0.tfrecord")).unwrap();
    let cut = dir.path().join("cut.tfrecord");
    std::fs::write(&cut, &part[..part.len() - 100]).unwrap();
    let e = open_err(&cut, &specs);
    assert!(
        matches!(e, Error::RecordTruncated { offset, .. } if offset > 0),
        "{e}"
    );
    let mut flipped = part.clone();
    flipped[200] ^= 1;
    let bad = dir.path().join("flipped.tfrecord");
    std::fs::write(&bad, flipped).unwrap();
    assert!(matches!(
        open_err(&bad, &specs),
        Error::RecordCrc { offset: 0, .. }
    ));
    let x = std::fs::read(fixtures().join("data_cnn_x.npy")).unwrap();
    let cut = dir.path().join("cut.npy");
    std::fs::write(&cut, &x[..x.len() - 4]).unwrap();
    let e = open_err(&cut, &specs[..1]);
    assert!(
        matches!(&e, Error::DataFormat { reason, .. } if reason.contains("truncated")),
        "{e}"
    );
    let z = std::fs::read(&train).unwrap();
    let cut = dir.path().join("cut.npz");
    std::fs::write(&cut, &z[..z.len() / 2]).unwrap();
    assert!(matches!(open_err(&cut, &specs), Error::DataFormat { .. }));

    // Empty data sets.
    let empty = dir.path().join("empty.tfrecord");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(open_err(&empty, &specs), Error::DataEmpty { .. }));
    let none = dir.path().join("none.npy");
    std::fs::write(&none, npy("<f4", &[0, 4], &[])).unwrap();
    let flat = [spec("v", DType::FLOAT, &[-1, 4])];
    assert!(matches!(open_err(&none, &flat), Error::DataEmpty { .. }));
    let empty_dir = dir.path().join("nothing");
    std::fs::create_dir(&empty_dir).unwrap();
    assert!(matches!(
        open_err(&empty_dir, &specs),
        Error::DataEmpty { .. }
    ));
}

#[test]
fn ragged_big_endian_oversized_and_unknown_data_and_too_large_shares_are_refused() {
    let (_, _, specs) = cnn_specs();
    let dir = tempfile::tempdir().unwrap();
    let flat = [spec("v", DType::FLOAT, &[-1, 4])];
    // Arrays of different row counts.
    let ragged = dir.path().join("ragged.npz");
    npz(
        &ragged,
        &[
            ("a", npy("<f4", &[3], &[0; 12])),
            ("b", npy("<i8", &[2], &[0; 16])),
        ],
    );
    let ab = [spec("a", DType::FLOAT, &[-1]), spec("b", DType(9), &[-1])];
    let e = open_err(&ragged, &ab);
    assert!(
        matches!(
            e,
            Error::DataRows {
                rows: 2,
                other_rows: 3,
                ..
            }
        ),
        "{e}"
    );
    // An uncompressed .npz (np.savez) reads too; big-endian data is refused.
    let fine = dir.path().join("fine.npz");
    npz(
        &fine,
        &[
            ("a", npy("<f4", &[2], &[0; 8])),
            ("b", npy("<i8", &[2], &[0; 16])),
        ],
    );
    assert_eq!(data::open(&fine, &ab).unwrap().len(), 2);
    let big = dir.path().join("big.npy");
    std::fs::write(&big, npy(">f4", &[2], &[0; 8])).unwrap();
    assert!(matches!(open_err(&big, &ab[..1]), Error::DataFormat { .. }));
    // A header claiming more rows than memory holds is refused before allocating.
    let huge = dir.path().join("huge.npy");
    std::fs::write(&huge, npy("<f4", &[1 << 40, 1 << 20], &[0; 8])).unwrap();
    assert!(matches!(open_err(&huge, &flat), Error::DataFormat { .. }));

    // A share larger than the data.
    let held_out = data::open(&fixtures().join("data_cnn_held_out.npz"), &specs).unwrap();
    let mut feeder = Feeder::new(Box::new(held_out), &specs, 1).unwrap();
    let e = feeder.take(61).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DataShare {
                rows: 61,
                len: 60,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("data_cnn_held_out.npz"), "{e}");

    // An unknown extension.
    let txt = dir.path().join("data.csv");
    std::fs::write(&txt, "1,2\n").unwrap();
    assert!(matches!(open_err(&txt, &specs), Error::DataFormat { .. }));
}

#[test]
fn a_fifo_or_a_device_given_as_data_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.npy");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let specs = [spec("x", DType::FLOAT, &[-1])];
    assert!(matches!(open_err(&fifo, &specs), Error::DataFormat { .. }));
    let fifo_records = dir.path().join("pipe.tfrecord");
    std::process::Command::new("mkfifo")
        .arg(&fifo_records)
        .status()
        .unwrap();
    assert!(matches!(
        open_err(&fifo_records, &specs),
        Error::DataFormat { .. }
    ));
    let zero = dir.path().join("zero.npz");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    assert!(matches!(open_err(&zero, &specs), Error::DataFormat { .. }));
    // In a directory too.
    let records = dir.path().join("records");
    std::fs::create_dir(&records).unwrap();
    std::process::Command::new("mkfifo")
        .arg(records.join("a.tfrecord"))
        .status()
        .unwrap();
    assert!(matches!(
        open_err(&records.join("a.tfrecord"), &specs),
        Error::DataFormat { .. }
    ));
    assert!(matches!(
        data::open(&records, &specs),
        Err(Error::DataFormat { .. })
    ));
}

#[test]
fn in_memory_arrays_built_in_rust() {
    let x = HostTensor::new(
        vec![4, 2],
        vec![0.0f32, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0].into(),
    )
    .unwrap();
    let y = HostTensor::new(vec![4], vec![0i64, 1, 2, 3].into()).unwrap();
    let d = InMemory::from_tensors("in memory", [("x", x), ("y", y)]).unwrap();
    let specs = [
        spec("x", DType::FLOAT, &[-1, 2]),
        spec("y", DType(9), &[-1]),
    ];
    let mut f = Feeder::new(Box::new(d), &specs, 9).unwrap();
    let step = f.take_step(&[2, 2]).unwrap();
    let mut ids: Vec<i64> = step
        .iter()
        .flat_map(|b| match &b.tensors["y"].values {
            Values::I64(v) => v.clone(),
            _ => panic!(),
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2, 3], "each replica its own rows");
    let e = InMemory::from_tensors("in memory", Vec::<(String, HostTensor)>::new()).unwrap_err();
    assert!(matches!(e, Error::DataEmpty { .. }));
}

#[test]
fn npz_arrays_no_input_names_are_left_unread() {
    let dir = tempfile::tempdir().unwrap();
    let extra = dir.path().join("extra.npz");
    npz(
        &extra,
        &[
            ("a", npy("<f4", &[2], &[0; 8])),
            ("b", npy("<i8", &[2], &[0; 16])),
            // What `np.savez` files carry beside the inputs: other rows, a scalar, strings.
            ("ids", npy("<i8", &[3], &[0; 24])),
            ("n", npy("<i8", &[], &[0; 8])),
            ("names", npy("<U3", &[2], &[0; 24])),
        ],
    );
    let ab = [spec("a", DType::FLOAT, &[-1]), spec("b", DType(9), &[-1])];
    let data = data::open(&extra, &ab).unwrap();
    assert_eq!(data.len(), 2);
    // A missing input still lists every array, the unread ones included.
    let abw = [ab[0].clone(), ab[1].clone(), spec("w", DType::FLOAT, &[-1])];
    let e = open_err(&extra, &abw);
    assert!(
        matches!(&e, Error::DataMissing { input, available, .. }
            if input == "w" && available == "a, b, ids, n, names"),
        "{e}"
    );
}

/// An `.npz` for the MLP fixture (`x`: 8 rows of 32 floats, `y`: 8 int64 classes) whose `x`
/// holds `bad` at row `row`.
fn mlp_rows(path: &Path, row: usize, bad: f32) {
    let mut x = vec![0.5f32; 8 * 32];
    x[row * 32 + 7] = bad;
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let yb: Vec<u8> = (0..8i64).flat_map(|v| (v % 4).to_le_bytes()).collect();
    npz(
        path,
        &[
            ("x", npy("<f4", &[8, 32], &xb)),
            ("y", npy("<i8", &[8], &yb)),
        ],
    );
}

#[test]
fn nan_and_infinite_rows_are_refused_before_a_cluster_naming_file_input_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let graph = fixtures().join("tf1_mlp_sparse.pb");
    let (good, nan, inf) = (
        dir.path().join("good.npz"),
        dir.path().join("nan.npz"),
        dir.path().join("inf.npz"),
    );
    mlp_rows(&good, 0, 0.25);
    mlp_rows(&nan, 3, f32::NAN);
    mlp_rows(&inf, 6, f32::INFINITY);
    match tf_iaware::Job::load(&graph, None, &nan) {
        Err(Error::DataValue {
            file, input, row, ..
        }) => {
            assert!(file.contains("nan.npz"), "{file}");
            assert_eq!((input.as_str(), row), ("x", 3));
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    // The held-out set too: its accuracy would be read, not trained on.
    let job = tf_iaware::Job::load(&graph, None, &good).unwrap();
    let e = job.with_held_out_file(&inf).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::DataValue { row: 6, .. }), "{e}");
    assert!(
        e.to_string().contains("inf.npz") && e.to_string().contains("row 6"),
        "{e}"
    );
}

/// An `.npz` for the MLP fixture (`x`: 8 rows of 32 floats) whose int64 classes `y` are
/// `labels`.
fn mlp_labels(path: &Path, labels: [i64; 8]) {
    let xb: Vec<u8> = (0..8 * 32)
        .flat_map(|i| (i as f32 / 256.0).to_le_bytes())
        .collect();
    let yb: Vec<u8> = labels.iter().flat_map(|v| v.to_le_bytes()).collect();
    npz(
        path,
        &[
            ("x", npy("<f4", &[8, 32], &xb)),
            ("y", npy("<i8", &[8], &yb)),
        ],
    );
}

#[test]
fn labels_outside_the_logits_classes_are_refused_before_a_cluster_naming_file_input_and_row() {
    // The fixture's sparse cross-entropy takes `y` with logits `scores` of 10 classes.
    let dir = tempfile::tempdir().unwrap();
    let graph = fixtures().join("tf1_mlp_sparse.pb");
    let (good, high, low) = (
        dir.path().join("good.npz"),
        dir.path().join("high.npz"),
        dir.path().join("low.npz"),
    );
    mlp_labels(&good, [0, 9, 1, 8, 2, 7, 3, 6]);
    mlp_labels(&high, [0, 9, 1, 8, 2, 10, 3, 6]);
    mlp_labels(&low, [0, 9, -1, 8, 2, 7, 3, 6]);
    for (path, row, value) in [(&high, 5, 10), (&low, 2, -1)] {
        let e = tf_iaware::Job::load(&graph, None, path)
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(&e, Error::DataValue { input, row: r, .. } if input == "y" && *r == row),
            "{e}"
        );
        let text = e.to_string();
        for piece in [
            path.file_name().unwrap().to_str().unwrap(),
            &format!("label {value} is outside the 10 classes [0, 10) of `scores`"),
        ] {
            assert!(text.contains(piece), "{text} lacks {piece}");
        }
    }
    // The held-out set too, where a label no logits can score would only lower the accuracy.
    let job = tf_iaware::Job::load(&graph, None, &good).unwrap();
    let e = job.with_held_out_file(&high).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::DataValue { row: 5, .. }), "{e}");
    assert!(e.to_string().contains("high.npz"), "{e}");
    let job = tf_iaware::Job::load(&graph, None, &good).unwrap();
    assert!(job.with_held_out_file(&good).is_ok());
}

#[test]
fn metric_logits_that_cannot_be_logits_are_refused_naming_the_op() {
    let graph = fixtures().join("tf1_mlp_sparse.pb");
    let train = fixtures().join("tf1_mlp_sparse_train.npz");
    for (logits, says) in [
        ("x", "`x` is a Placeholder op, a graph input"),
        ("loss", "rank 0"),
    ] {
        let job = tf_iaware::Job::load(&graph, None, &train).unwrap();
        let metric = tf_iaware::Metric::Accuracy {
            logits: logits.into(),
            label: "y".into(),
        };
        let e = job.with_metric(metric).map(|_| ()).unwrap_err();
        assert!(matches!(e, Error::Sidecar { .. }), "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
    let job = tf_iaware::Job::load(&graph, None, &train).unwrap();
    let metric = tf_iaware::Metric::Accuracy {
        logits: "scores".into(),
        label: "y".into(),
    };
    assert!(job.with_metric(metric).is_ok());
}
