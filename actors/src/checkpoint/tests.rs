use super::*;
use std::fs;

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn names_round_trip_and_other_files_are_not_ours() {
    assert_eq!(
        parse_name("p3", &manifest_name("p3", 12)),
        Some((12, FileKind::Manifest))
    );
    assert_eq!(
        parse_name("p3", &part_name("p3", 3, "shard-1")),
        Some((3, FileKind::Part))
    );
    assert_eq!(
        parse_name("p3", &format!(".{}.tmp", part_name("p3", 9, "worker-0"))),
        Some((9, FileKind::Temp))
    );
    assert_eq!(
        parse_name("p3", &format!(".{}.tmp", manifest_name("p3", 9))),
        Some((9, FileKind::Temp))
    );
    for other in [
        "strads-round-3.manifest",
        "p3-round-x.manifest",
        "p3-round-3-.bin",
        "p3-round-3-a/b.bin",
        "p3-round-3.bin",
        "p3-round-.manifest",
        "p3-shard-0-round-3.manifest",
        "coefficients.tsv",
    ] {
        assert_eq!(parse_name("p3", other), None, "{other}");
    }
    // A scheme that is a prefix of another does not claim its files.
    assert_eq!(parse_name("ps", &manifest_name("ps-shard-0", 4)), None);
}

#[test]
fn prune_keeps_the_newest_complete_checkpoints_and_deletes_manifests_first() {
    let s = "lasso";
    let mut list = Vec::new();
    for r in [10, 20, 30] {
        list.push(part_name(s, r, "worker-0"));
        list.push(part_name(s, r, "scheduler"));
        list.push(manifest_name(s, r));
    }
    // An orphan of a crashed checkpoint, a stale temp file, a newer manifest of a diverged
    // run, a part of a newer checkpoint in progress, and files that are not ours.
    list.push(part_name(s, 25, "worker-1"));
    list.push(format!(".{}.tmp", part_name(s, 25, "scheduler")));
    list.push(manifest_name(s, 40));
    list.push(part_name(s, 40, "worker-0"));
    list.push("coefficients.tsv".into());
    list.push(manifest_name("p3", 1));
    let doomed = prune_plan(s, &list, 30, 2);
    let expected = names(&[
        &manifest_name(s, 10),
        &manifest_name(s, 40),
        &part_name(s, 10, "worker-0"),
        &part_name(s, 10, "scheduler"),
        &part_name(s, 25, "worker-1"),
        &format!(".{}.tmp", part_name(s, 25, "scheduler")),
    ]);
    assert_eq!(doomed, expected);
    assert_eq!(manifest_rounds(s, &list), vec![10, 20, 30, 40]);
    assert_eq!(prune_plan(s, &list, 30, 3).len(), 3);
}

#[test]
fn choose_falls_back_to_older_and_reports_all_reasons() {
    let pick = choose_newest_valid(&[1, 2, 3], |r| if r == 3 { Err("bad") } else { Ok(r) });
    assert_eq!(pick, Ok((2, vec!["bad".to_string()])));
    let none = choose_newest_valid::<u64, String>(&[1, 2], |r| Err(format!("round {r}")));
    assert_eq!(
        none,
        Err(vec!["round 2".to_string(), "round 1".to_string()])
    );
    assert_eq!(
        choose_newest_valid::<u64, &str>(&[], |_| Ok(0)),
        Err(Vec::new())
    );
}

/// A complete checkpoint of `round` with two parts and `meta`.
fn save(set: &CheckpointSet, round: u64, meta: &[u8]) {
    let parts = ["scheduler", "worker-0"]
        .iter()
        .map(|p| {
            set.write_part(round, p, format!("{p} at {round}").as_bytes())
                .unwrap()
        })
        .collect();
    set.commit(round, meta, parts).unwrap();
}

fn accept_meta(
    want: &'static [u8],
) -> impl FnMut(Checkpoint) -> Result<Checkpoint, CheckpointError> {
    move |ck| {
        if ck.meta == want {
            Ok(ck)
        } else {
            Err(ck.invalid("another job"))
        }
    }
}

#[test]
fn a_committed_checkpoint_loads_and_only_the_newest_n_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let set = CheckpointSet::new(dir.path().join("ck"), "t");
    assert!(set.rounds().unwrap().is_empty());
    for r in [4, 8, 12] {
        save(&set, r, b"job");
    }
    assert_eq!(set.rounds().unwrap(), vec![8, 12]);
    assert!(!set.dir().join(part_name("t", 4, "worker-0")).exists());
    let ck = set.newest_valid(accept_meta(b"job")).unwrap();
    assert_eq!(ck.round, 12);
    assert_eq!(ck.part("worker-0").unwrap(), b"worker-0 at 12");
    assert_eq!(ck.part_names(), ["scheduler", "worker-0"]);
    assert!(
        ck.part("worker-9")
            .unwrap_err()
            .to_string()
            .contains("worker-9")
    );
    assert_eq!(
        set.read_part(12, &ck.parts[0].0).unwrap(),
        b"scheduler at 12"
    );
    let e = set
        .newest_valid(accept_meta(b"other"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no valid checkpoint") && e.contains("another job"),
        "{e}"
    );
    assert!(e.contains(&manifest_name("t", 12)), "{e}");
    // No temp files are left behind; keeping three keeps three.
    assert!(
        durable::list_names(set.dir())
            .unwrap()
            .iter()
            .all(|n| !n.ends_with(".tmp"))
    );
    let three = set.clone().keeping(3);
    save(&three, 16, b"job");
    save(&three, 20, b"job");
    assert_eq!(three.rounds().unwrap(), vec![12, 16, 20]);
    // Rewriting a part of a committed round makes its manifest stale.
    three.write_part(20, "worker-0", b"again").unwrap();
    assert_eq!(three.rounds().unwrap(), vec![12, 16]);
    // A fresh run clears the manifests.
    three.clear().unwrap();
    assert!(three.rounds().unwrap().is_empty());
    let e = three
        .newest_valid(accept_meta(b"job"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no manifest found") && e.contains("ck"), "{e}");
}

/// A damaged newest checkpoint is skipped for the previous one; both damaged, none loads.
#[test]
fn a_damaged_newest_checkpoint_falls_back_to_the_previous_one() {
    type Damage = fn(&Path);
    let damages: [(&str, &str, Damage); 6] = [
        ("truncated part", "truncated", |d| {
            let p = d.join(part_name("t", 8, "worker-0"));
            let b = fs::read(&p).unwrap();
            fs::write(&p, &b[..b.len() - 3]).unwrap();
        }),
        ("flipped byte in a part", "checksum", |d| {
            let p = d.join(part_name("t", 8, "scheduler"));
            let mut b = fs::read(&p).unwrap();
            b[2] ^= 0x20;
            fs::write(&p, b).unwrap();
        }),
        ("flipped byte in the manifest", "checksum", |d| {
            let p = d.join(manifest_name("t", 8));
            let mut b = fs::read(&p).unwrap();
            b[12] ^= 0x01;
            fs::write(&p, b).unwrap();
        }),
        ("truncated manifest", "not a manifest", |d| {
            fs::write(d.join(manifest_name("t", 8)), b"PETR").unwrap();
        }),
        ("missing part", "missing", |d| {
            fs::remove_file(d.join(part_name("t", 8, "worker-0"))).unwrap();
        }),
        (
            "manifest of another round",
            "manifest is for t round 4",
            |d| {
                fs::copy(d.join(manifest_name("t", 4)), d.join(manifest_name("t", 8))).unwrap();
            },
        ),
    ];
    for (what, reason, damage) in damages {
        let dir = tempfile::tempdir().unwrap();
        let set = CheckpointSet::new(dir.path(), "t");
        save(&set, 4, b"job");
        save(&set, 8, b"job");
        damage(dir.path());
        let e = set.load(8).unwrap_err().to_string();
        assert!(e.contains(reason), "{what}: {e}");
        let ck = set.newest_valid(accept_meta(b"job")).unwrap();
        assert_eq!(ck.round, 4, "{what}: falls back to the older one");
        fs::remove_file(dir.path().join(manifest_name("t", 4))).unwrap();
        let e = set.newest_valid(accept_meta(b"job")).unwrap_err();
        assert!(matches!(e, CheckpointError::NoValid { .. }), "{what}: {e}");
        assert!(e.to_string().contains(reason), "{what}: {e}");
    }
}

#[test]
fn a_manifest_naming_a_hostile_part_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let set = CheckpointSet::new(dir.path(), "t");
    let m = Manifest {
        version: VERSION,
        scheme: "t".into(),
        round: 1,
        meta: Vec::new(),
        parts: vec![PartEntry {
            part: "../../etc/passwd".into(),
            digest: FileDigest::of(b""),
        }],
    };
    let body = rmp_serde::to_vec(&m).unwrap();
    fs::write(set.manifest_path(1), durable::frame(MAGIC, &body)).unwrap();
    let e = set.load(1).unwrap_err().to_string();
    assert!(e.contains("invalid file name"), "{e}");
    assert!(set.write_part(1, "a/b", b"x").is_err());
}

#[test]
fn an_older_format_is_refused_naming_the_file_and_the_format() {
    for (magic, what) in LEGACY_FORMATS {
        let dir = tempfile::tempdir().unwrap();
        let set = CheckpointSet::new(dir.path(), "strads");
        save(&set, 3, b"job");
        let old = dir.path().join("strads-round-5.manifest");
        let mut bytes = magic.to_vec();
        bytes.extend_from_slice(b"old body and checksum");
        fs::write(&old, bytes).unwrap();
        let magic = std::str::from_utf8(magic).unwrap();
        let part = set.write_part(4, "worker-0", b"new").unwrap();
        for e in [
            set.newest_valid(Ok).unwrap_err(),
            set.clear().unwrap_err(),
            set.load(5).unwrap_err(),
            set.commit(4, b"job", vec![part.clone()]).unwrap_err(),
        ] {
            assert!(
                matches!(&e, CheckpointError::OldFormat { path, .. } if path == &old),
                "{e}"
            );
            let text = e.to_string();
            assert!(
                text.contains("strads-round-5.manifest")
                    && text.contains(magic)
                    && text.contains(what),
                "{text}"
            );
        }
    }
    assert_eq!(legacy_format(b"PETRCKPT...."), None);
    assert_eq!(legacy_format(b"PSJO"), None);
}
