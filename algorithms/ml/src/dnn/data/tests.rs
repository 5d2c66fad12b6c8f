use super::*;

/// Writes an IDX images file (what `read_idx_images` reads).
fn write_idx_images(path: &Path, images: &IdxImages) -> std::io::Result<()> {
    let dims = [images.n, images.rows, images.cols].map(|d| (d as u32).to_be_bytes());
    let header = [IDX_IMAGES_MAGIC.to_be_bytes()].into_iter().chain(dims);
    std::fs::write(
        path,
        [header.flatten().collect(), images.pixels.clone()].concat(),
    )
}

/// Writes an IDX labels file (what `read_idx_labels` reads).
fn write_idx_labels(path: &Path, labels: &[u8]) -> std::io::Result<()> {
    let header = [IDX_LABELS_MAGIC, labels.len() as u32].map(u32::to_be_bytes);
    std::fs::write(path, [header.concat(), labels.to_vec()].concat())
}

fn sample_images() -> IdxImages {
    IdxImages {
        n: 3,
        rows: 2,
        cols: 4,
        pixels: (0..24u8).map(|v| v * 10).collect(),
    }
}

#[test]
fn idx_roundtrip_and_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let ip = dir.path().join("imgs-idx3-ubyte");
    let lp = dir.path().join("labels-idx1-ubyte");
    write_idx_images(&ip, &sample_images()).unwrap();
    write_idx_labels(&lp, &[2, 0, 9]).unwrap();
    assert_eq!(read_idx_images(&ip).unwrap(), sample_images());
    let ds = load_idx_dataset(&ip, &lp, 10).unwrap();
    assert_eq!(ds.x.shape(), &[3, 1, 2, 4]);
    assert_eq!(ds.y, vec![2, 0, 9]);
    assert!((ds.x[[2, 0, 1, 3]] - 230.0 / 255.0).abs() < 1e-6);
    // raw header bytes are big-endian as the format says
    let raw = std::fs::read(&ip).unwrap();
    assert_eq!(&raw[..8], &[0, 0, 8, 3, 0, 0, 0, 3]);
}

#[test]
fn idx_errors_name_file_and_problem() {
    let dir = tempfile::tempdir().unwrap();
    let ip = dir.path().join("imgs");
    let lp = dir.path().join("labels");
    write_idx_images(&ip, &sample_images()).unwrap();
    let good = std::fs::read(&ip).unwrap();

    // labels file given where images are expected: bad magic
    write_idx_labels(&lp, &[1, 2, 3]).unwrap();
    let e = read_idx_images(&lp).unwrap_err();
    assert!(matches!(e, MlError::BadMagic { found: 0x801, .. }));
    assert!(e.to_string().contains("labels") && e.to_string().contains("magic"));

    // truncated in the magic, the header and the data
    for (cut, what) in [(2, "magic number"), (9, "header"), (20, "data")] {
        std::fs::write(&ip, &good[..cut]).unwrap();
        match read_idx_images(&ip).unwrap_err() {
            MlError::DatasetTruncated { what: w, path, .. } => {
                assert_eq!(w, what);
                assert_eq!(path, ip);
            }
            other => panic!("unexpected {other}"),
        }
    }
    // trailing bytes
    let mut long = good.clone();
    long.push(0);
    std::fs::write(&ip, &long).unwrap();
    assert!(matches!(
        read_idx_images(&ip),
        Err(MlError::Dimension { .. })
    ));
    // huge dimensions: overflow or truncation, never an allocation or panic
    let mut huge = IDX_IMAGES_MAGIC.to_be_bytes().to_vec();
    for _ in 0..3 {
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
    }
    std::fs::write(&ip, &huge).unwrap();
    assert!(read_idx_images(&ip).is_err());
    // zero-sized images
    std::fs::write(&ip, [0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5]).unwrap();
    assert!(matches!(
        read_idx_images(&ip),
        Err(MlError::Dimension { .. })
    ));
    // count mismatch and label range
    std::fs::write(&ip, &good).unwrap();
    write_idx_labels(&lp, &[1, 2]).unwrap();
    assert!(matches!(
        load_idx_dataset(&ip, &lp, 10),
        Err(MlError::CountMismatch {
            n_images: 3,
            n_labels: 2,
            ..
        })
    ));
    write_idx_labels(&lp, &[1, 2, 10]).unwrap();
    assert!(matches!(
        load_idx_dataset(&ip, &lp, 10),
        Err(MlError::LabelOutOfRange { index: 2, .. })
    ));
    // missing file
    let e = read_idx_labels(dir.path().join("nope")).unwrap_err();
    assert!(matches!(e, MlError::DatasetIo { .. }) && e.to_string().contains("nope"));
}

proptest::proptest! {
    #[test]
    fn idx_parser_never_panics(bytes in proptest::collection::vec(0u8..=255, 0..64)) {
        let p = Path::new("fuzz");
        let _ = parse_idx_images(&bytes, p);
        let _ = parse_idx_labels(&bytes, p);
    }
}

#[test]
fn generators_are_seeded_and_balanced() {
    let a = gaussian_clusters(40, 3, 4, 0.5, 1).unwrap();
    let b = gaussian_clusters(40, 3, 4, 0.5, 1).unwrap();
    assert_eq!(a.x, b.x);
    assert_eq!(a.y, b.y);
    for c in 0..4 {
        assert_eq!(a.y.iter().filter(|&&y| y == c).count(), 10);
    }
    assert!(gaussian_clusters(10, 3, 0, 1.0, 1).is_err());
    let t = teacher_mlp(200, 5, 8, 3, 3).unwrap();
    assert_eq!(t.x.shape(), &[200, 5]);
    assert!(t.y.iter().all(|&y| y < 3));
}
