//! `sealvol mount` as a user meets it: a version appears at once as
//! read-only files that match the source byte for byte (modes and symlinks
//! too), its bytes arrive as they are read and are checked first, reads run
//! side by side, the registry may go away and come back, and every mount is
//! gone when its test ends, passed or failed.
//!
//! Each mount here is a real `sealvol mount` process on a real FUSE mount
//! (CI runs as root with /dev/fuse). A [`Mounted`] guard stops the process
//! and lazily unmounts whatever is left when it is dropped, and every read
//! runs with a deadline, so a hung mount fails the test instead of hanging
//! it.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::{symlink, FileExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sealvol_tests::fuse::*;
use sealvol_tests::{
    cached_chunks, fails, gets_served, host, noise, ok, push_hex, s, sealvol_bin, sha256, stderr,
    write, FlipProxy, Gate, Sandbox, Server,
};

/// Larger than the 16 MiB maximum chunk, so the big file has several chunks.
const BIG: usize = 40 << 20;

/// A small model directory: a big file of several chunks, JSON files, an
/// empty file, an empty directory, symlinks, 0600, 0755 and 0444 files,
/// a 0700 directory and nested directories.
fn sample(root: &Path) {
    write(&root.join("big.bin"), &noise(BIG, 1), 0o644);
    write(&root.join("config.json"), b"{\"hidden_size\": 64}\n", 0o644);
    write(&root.join("tokenizer.json"), &noise(3000, 2), 0o444);
    write(&root.join("empty"), b"", 0o644);
    write(&root.join("secret.key"), b"not for everyone\n", 0o600);
    write(&root.join("run.sh"), b"#!/bin/sh\necho hi\n", 0o755);
    write(&root.join("nested/params.json"), b"{\"lr\": 0.1}\n", 0o644);
    write(&root.join("nested/deeper/notes.txt"), b"deep\n", 0o644);
    write(&root.join("private/key"), b"k\n", 0o600);
    std::fs::create_dir_all(root.join("emptydir")).unwrap();
    symlink("nested/params.json", root.join("link")).unwrap();
    symlink("../config.json", root.join("nested/up")).unwrap();
    for (dir, mode) in [
        ("", 0o755),
        ("nested", 0o755),
        ("nested/deeper", 0o750),
        ("emptydir", 0o755),
        ("private", 0o700),
    ] {
        std::fs::set_permissions(root.join(dir), std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// Whether the suite runs against the fanotify engine
/// (`SEALVOL_TEST_ENGINE=fanotify`; see [`sealvol_tests::test_engine`]).
fn fanotify() -> bool {
    sealvol_tests::test_engine() == "fanotify"
}

/// Mounts `bdn:ns/vol` at `mnt` with the chunk cache `cache`, plus `extra`
/// flags: what most tests mount.
fn mount_volume(sb: &Sandbox, registry: &str, mnt: &Path, cache: &str, extra: &[&str]) -> Mounted {
    let mut args = vec!["mount", "bdn:ns/vol", s(mnt), "--cache-dir", cache];
    args.extend_from_slice(extra);
    Mounted::start(sb, registry, &args, &[mnt])
}

/// Drops the kernel's cached pages of `path`, so the next read reaches the
/// mount process.
fn drop_page_cache(path: &Path) {
    let f = File::open(path).unwrap();
    use std::os::fd::AsRawFd as _;
    // SAFETY: fadvise on a descriptor we own.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "fadvise {}", path.display());
}

/// [`sealvol_tests::assert_same_tree`], with a deadline.
fn assert_same_tree(expected: &Path, actual: &Path) {
    let (e, a) = (expected.to_path_buf(), actual.to_path_buf());
    within("comparing the trees", move || {
        sealvol_tests::assert_same_tree(&e, &a)
    });
}

/// The chunks of `big.bin` in [`sample`]: (digest, offset, length).
fn big_chunks(addr: &str, repo: &str, hex: &str) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for (digest, size) in sealvol_tests::chunk_blobs(addr, repo, &format!("b3-{hex}")) {
        if offset == BIG as u64 {
            break;
        }
        out.push((digest, offset, size));
        offset += size;
    }
    assert_eq!(offset, BIG as u64, "big.bin's chunks come first");
    assert!(out.len() >= 3, "big.bin has too few chunks: {out:?}");
    out
}

#[test]
fn a_mount_matches_its_source_and_fetches_only_what_is_read() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let big = big_chunks(&reg, "ns/vol", &hex);
    let cache = sb.path().join("mount-cache");
    let mnt = mountpoint(&sb, "mnt");
    // What the mount downloads, seen on the wire: an engine may keep the
    // bytes somewhere other than the chunk cache.
    let gate = Gate::start(&reg);
    let chunks: BTreeSet<String> = sealvol_tests::chunk_blobs(&reg, "ns/vol", &format!("b3-{hex}"))
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    let fetched =
        || -> BTreeSet<String> { gate.blobs_got().intersection(&chunks).cloned().collect() };

    let reference = format!("bdn:ns/vol@b3:{hex}");
    let mut m = Mounted::start(
        &sb,
        &gate.addr(),
        &["mount", &reference, s(&mnt), "--cache-dir", s(&cache)],
        &[&mnt],
    );
    assert_eq!(
        m.ready(),
        [format!("sealvol: mounted {reference} at {}", mnt.display())]
    );
    assert!(is_mounted(&mnt));
    // Names, kinds, modes, sizes and link targets, without reading a byte
    // of content: nothing but the tree index was fetched.
    let meta = |p: &str| std::fs::symlink_metadata(mnt.join(p)).unwrap();
    for (path, mode, size) in [
        ("big.bin", 0o644, BIG as u64),
        ("tokenizer.json", 0o444, 3000),
        ("secret.key", 0o600, 17),
        ("run.sh", 0o755, 18),
        ("empty", 0o644, 0),
    ] {
        let m = meta(path);
        assert!(m.is_file(), "{path}");
        assert_eq!((m.mode() & 0o7777, m.len()), (mode, size), "{path}");
        if fanotify() {
            // Local sparse files: blocks are what is filled so far.
            assert!(m.blocks() <= size.div_ceil(512) + 8, "{path}");
        } else {
            // Blocks as a file of that size takes, so `du` adds up.
            assert_eq!(m.blocks(), size.div_ceil(512), "{path}");
        }
        // SAFETY: getuid/getgid cannot fail.
        assert_eq!((m.uid(), m.gid()), unsafe {
            (libc::getuid(), libc::getgid())
        });
    }
    assert_eq!(meta("private").mode() & 0o7777, 0o700);
    assert_eq!(meta("nested/deeper").mode() & 0o7777, 0o750);
    // A directory links to itself, its parent's entry and each subdirectory.
    assert_eq!(meta("nested").nlink(), 3);
    assert_eq!(meta("emptydir").nlink(), 2);
    assert!(meta("link").file_type().is_symlink());
    assert_eq!(
        std::fs::read_link(mnt.join("nested/up")).unwrap(),
        Path::new("../config.json")
    );
    let mut names: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "big.bin",
            "config.json",
            "empty",
            "emptydir",
            "link",
            "nested",
            "private",
            "run.sh",
            "secret.key",
            "tokenizer.json"
        ]
    );
    assert_eq!(
        std::fs::metadata(mnt.join("nope")).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
    assert!(fetched().is_empty(), "a chunk was fetched at mount");

    // A read fetches the chunks it touches and no other.
    assert_eq!(
        read(&mnt.join("config.json")).unwrap(),
        b"{\"hidden_size\": 64}\n"
    );
    assert_eq!(fetched().len(), 1);
    let (digest, offset, len) = &big[1];
    let at = offset + len / 2;
    let source = noise(BIG, 1);
    assert_eq!(
        pread(&mnt.join("big.bin"), at, 4096).unwrap(),
        &source[at as usize..at as usize + 4096]
    );
    let got = fetched();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.contains(digest), "big.bin's second chunk not fetched");

    // Everything, as diff sees it, and as the pull tests compare trees.
    let out = within("diff -r", {
        let (src, mnt) = (src.clone(), mnt.clone());
        move || {
            Command::new("diff")
                .args(["-r", "--no-dereference"])
                .arg(&src)
                .arg(&mnt)
                .output()
                .unwrap()
        }
    });
    assert!(
        out.status.success(),
        "diff -r {} {}:\n{}{}",
        src.display(),
        mnt.display(),
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    assert_same_tree(&src, &mnt);
    let du = ok(
        Command::new("du").arg("-sk").arg(&mnt).output().unwrap(),
        "du",
    );
    let kib: u64 = du.split_whitespace().next().unwrap().parse().unwrap();
    assert!(kib >= (BIG as u64) >> 10, "du says {du}");

    // Read-only: every write is refused with EROFS.
    let erofs = |r: std::io::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{what}: {e}");
    };
    erofs(
        std::fs::OpenOptions::new()
            .write(true)
            .open(mnt.join("config.json"))
            .map(drop),
        "open for writing",
    );
    erofs(File::create(mnt.join("new")).map(drop), "create");
    erofs(std::fs::create_dir(mnt.join("d")), "mkdir");
    erofs(std::fs::remove_file(mnt.join("empty")), "unlink");
    erofs(
        std::fs::set_permissions(mnt.join("run.sh"), std::fs::Permissions::from_mode(0o777)),
        "chmod",
    );
    assert_same_tree(&src, &mnt);

    // SIGTERM: unmounted and gone, exit 0.
    let status = m.stop();
    assert!(status.success(), "{status:?}: {}", m.stderr());
    assert!(!is_mounted(&mnt), "still mounted after SIGTERM");
    assert!(m.stdout().contains("sealvol: unmounted"), "{}", m.stdout());
}

#[test]
fn mmap_reads_the_same_bytes() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let mnt = mountpoint(&sb, "mnt");
    let _m = mount_volume(&sb, &reg, &mnt, s(&sb.path().join("c")), &[]);
    let source = noise(BIG, 1);
    let path = mnt.join("big.bin");
    let (header, tail, middle, whole) = within("mmap reads", move || {
        let f = File::open(&path).unwrap();
        // SAFETY: the mapped file is on a read-only mount; nothing changes it.
        let map = unsafe { memmap2::Mmap::map(&f) }.expect("mmap a file of the mount");
        assert_eq!(map.len(), BIG);
        // A safetensors loader reads the header first, then jumps around.
        let header = map[..8].to_vec();
        let tail = map[BIG - 100..].to_vec();
        let middle = map[BIG / 2..BIG / 2 + 4096].to_vec();
        (header, tail, middle, sha256(&map))
    });
    assert_eq!(header, source[..8]);
    assert_eq!(tail, source[BIG - 100..]);
    assert_eq!(middle, source[BIG / 2..BIG / 2 + 4096]);
    assert_eq!(whole, sha256(&source));
}

#[test]
fn eight_readers_run_side_by_side_and_share_fetches() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    let files: Vec<(String, Vec<u8>)> = (0..8u64)
        .map(|i| {
            (
                format!("shard-{i}.bin"),
                noise((3 << 20) + 1000 * i as usize, 100 + i),
            )
        })
        .collect();
    for (name, bytes) in &files {
        write(&src.join(name), bytes, 0o644);
    }
    let shared = noise(BIG, 7);
    write(&src.join("shared.bin"), &shared, 0o644);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let mnt = mountpoint(&sb, "mnt");
    let _m = mount_volume(&sb, &reg, &mnt, s(&sb.path().join("c")), &[]);

    // Eight readers, each over its own file in 128 KiB reads, all at once.
    let barrier = Arc::new(std::sync::Barrier::new(files.len()));
    let readers: Vec<_> = files
        .iter()
        .map(|(name, _)| {
            let (path, barrier) = (mnt.join(name), barrier.clone());
            std::thread::spawn(move || {
                let mut f = File::open(&path).unwrap();
                barrier.wait();
                let mut out = Vec::new();
                let mut buf = vec![0u8; 128 << 10];
                loop {
                    let n = f.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    out.extend_from_slice(&buf[..n]);
                }
                sha256(&out)
            })
        })
        .collect();
    let sums = within("eight readers", move || {
        readers
            .into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    for ((name, bytes), sum) in files.iter().zip(sums) {
        assert_eq!(sum, sha256(bytes), "{name}");
    }

    // A read is served once its 1 MiB piece is checked (SPEC.md §2.5), so
    // it fetches every chunk that piece overlaps: one, two or three.
    let tree = sealvol_tests::forge::Mirror::new(&reg)
        .fetch_ref("ns/vol", "head")
        .tree;
    let Some(sealvol_spec::tree::EntryData::File { chunks, .. }) =
        tree.get("shared.bin").map(|e| &e.data)
    else {
        panic!("shared.bin is a file of the version");
    };
    let covering = |from: u64, to: u64| {
        chunks
            .iter()
            .filter(|c| c.offset < to && c.offset + u64::from(c.length) > from)
            .count() as u64
    };
    let last_piece = (BIG as u64 - 1) / (1 << 20) * (1 << 20);

    // What one chunk fetch costs the registry in GETs (the client may ask
    // `/v2/` first), measured on the last piece of the shared file; each
    // count includes the GET /metrics that took the one before.
    let before = gets_served(&reg);
    assert_eq!(
        pread(&mnt.join("shared.bin"), BIG as u64 - 4096, 4096).unwrap(),
        shared[BIG - 4096..]
    );
    let fetched = gets_served(&reg) - before - 1;
    let last = covering(last_piece, BIG as u64);
    assert!(
        fetched >= last && fetched.is_multiple_of(last),
        "{fetched} GETs for {last} chunks"
    );
    let per_fetch = fetched / last;

    // Eight readers of the first piece, none at offset 0 and one read
    // each, so nothing is read ahead: the registry sends each chunk under
    // that piece once.
    let before = gets_served(&reg);
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let readers: Vec<_> = (1..=8u64)
        .map(|i| {
            let (path, barrier) = (mnt.join("shared.bin"), barrier.clone());
            std::thread::spawn(move || {
                let f = File::open(&path).unwrap();
                barrier.wait();
                let mut buf = vec![0u8; 4096];
                let at = (i * 100) << 10;
                f.read_exact_at(&mut buf, at).unwrap();
                (at, buf)
            })
        })
        .collect();
    let got = within("eight readers of one chunk", move || {
        readers
            .into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    for (at, buf) in got {
        assert_eq!(buf, shared[at as usize..at as usize + 4096], "at {at}");
    }
    assert_eq!(
        gets_served(&reg) - before - 1,
        per_fetch * covering(0, 1 << 20),
        "eight readers of one piece fetched a chunk more than once"
    );
}

#[test]
fn a_config_file_mounts_every_entry() {
    let sb = Sandbox::new();
    let (a, b) = (sb.path().join("a"), sb.path().join("b"));
    sample(&a);
    write(&b.join("adapter.safetensors"), &noise(5 << 20, 9), 0o644);
    write(&b.join("adapter_config.json"), b"{\"r\": 8}\n", 0o644);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    push_hex(&sb, &reg, &a, "bdn:ns/base", &[]);
    let hex_b = push_hex(&sb, &reg, &b, "bdn:ns/lora", &[]);
    let deploy = sb.path().join("deploy");
    let mnt_a = mountpoint(&sb, "deploy/models/base");
    let mnt_b = mountpoint(&sb, "elsewhere/lora");
    let config = deploy.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "# the deployment file\n\
             name: chat\n\
             replicas: 2\n\
             bdn:\n  \
               mounts:\n    \
                 - source: bdn:ns/base:head\n      \
                   path: models/base\n    \
                 - source: \"bdn:ns/lora@b3:{hex_b}\"\n      \
                   path: {}\n",
            mnt_b.display()
        ),
    )
    .unwrap();
    let mut m = Mounted::start(
        &sb,
        &reg,
        &[
            "mount",
            "--config",
            s(&config),
            "--cache-dir",
            s(&sb.path().join("c")),
        ],
        &[&mnt_a, &mnt_b],
    );
    assert!(
        m.ready()[0].ends_with(&format!(" at {}", mnt_a.display())),
        "{:?}",
        m.ready()
    );
    assert_eq!(
        m.ready()[1],
        format!(
            "sealvol: mounted bdn:ns/lora@b3:{hex_b} at {}",
            mnt_b.display()
        )
    );
    assert_same_tree(&a, &mnt_a);
    assert_same_tree(&b, &mnt_b);
    let status = m.stop();
    assert!(status.success(), "{status:?}: {}", m.stderr());
    assert!(!is_mounted(&mnt_a) && !is_mounted(&mnt_b));

    // A file without mounts, or with a bad ref, fails before mounting.
    std::fs::write(&config, "bdn:\n  mounts: []\n").unwrap();
    let line = fails(
        sb.sealvol(&reg, &["mount", "--config", s(&config)]),
        "mount an empty list",
    );
    assert!(line.contains("no mounts"), "{line}");
    std::fs::write(
        &config,
        "bdn:\n  mounts:\n    - {source: bdn:ns/Bad, path: x}\n",
    )
    .unwrap();
    fails(
        sb.sealvol(&reg, &["mount", "--config", s(&config)]),
        "mount a bad ref",
    );
    assert!(!is_mounted(&mnt_a) && !is_mounted(&mnt_b));
}

#[test]
fn reads_of_cached_data_go_on_while_the_registry_is_down() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let root = sb.path().join("serve");
    let serve = Server::start(&root);
    let reg = host(&serve);
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let big = big_chunks(&reg, "ns/vol", &hex);
    let mnt = mountpoint(&sb, "mnt");
    let _m = mount_volume(&sb, &reg, &mnt, s(&sb.path().join("c")), &[]);
    let source = noise(BIG, 1);
    let path = mnt.join("big.bin");
    // Some of big.bin's first chunk and config.json are read, so cached.
    // (One small read: reads in order would fetch chunks ahead.)
    assert_eq!(pread(&path, 100, 4096).unwrap(), source[100..4196]);
    let config = read(&mnt.join("config.json")).unwrap();

    // The registry dies.
    serve.kill();
    for p in [&path, &mnt.join("config.json")] {
        drop_page_cache(p);
    }
    assert_eq!(read(&mnt.join("config.json")).unwrap(), config);
    assert_eq!(
        pread(&path, 100, 4096).unwrap(),
        source[100..4196],
        "cached chunk"
    );
    // Data not cached: EIO, soon, each time.
    let (_, last_offset, _) = *big.last().unwrap();
    for _ in 0..2 {
        let started = Instant::now();
        assert_eio(
            pread(&path, last_offset + 10, 4096),
            "uncached read, registry down",
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "EIO took {:?}",
            started.elapsed()
        );
    }
    assert_eio(read(&mnt.join("tokenizer.json")), "another uncached file");

    // The registry is back on the same address: the same reads succeed.
    let _back = Server::start_with(&["serve", "--addr", &reg, "--root", s(&root)], &root);
    let at = last_offset as usize + 10;
    assert_eq!(
        pread(&path, last_offset + 10, 4096).unwrap(),
        source[at..at + 4096]
    );
    assert_same_tree(&src, &mnt);
}

#[test]
fn a_read_waiting_on_a_hung_registry_blocks_no_other_read() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let big = big_chunks(&reg, "ns/vol", &hex);
    let gate = Gate::start(&reg);
    let mnt = mountpoint(&sb, "mnt");
    let _m = Mounted::start(
        &sb,
        &gate.addr(),
        &[
            "mount",
            "bdn:ns/vol",
            s(&mnt),
            "--cache-dir",
            s(&sb.path().join("c")),
            "--fetch-timeout",
            "10",
        ],
        &[&mnt],
    );
    let config = read(&mnt.join("config.json")).unwrap();
    let params = read(&mnt.join("nested/params.json")).unwrap();

    gate.hold.store(true, Ordering::SeqCst);
    let (_, last_offset, _) = *big.last().unwrap();
    let cold = {
        let path = mnt.join("big.bin");
        std::thread::spawn(move || {
            let started = Instant::now();
            let r = File::open(&path).and_then(|f| {
                let mut buf = vec![0u8; 4096];
                f.read_exact_at(&mut buf, last_offset + 10).map(|()| buf)
            });
            (r, started.elapsed())
        })
    };
    // Give the cold read time to reach the mount and wait there.
    std::thread::sleep(Duration::from_millis(500));
    for (p, want) in [("config.json", &config), ("nested/params.json", &params)] {
        drop_page_cache(&mnt.join(p));
        assert_eq!(&read(&mnt.join(p)).unwrap(), want, "{p}");
    }
    assert!(std::fs::read_dir(&mnt).unwrap().count() > 5);
    assert!(
        !cold.is_finished(),
        "the cold read ended before the cached reads were done"
    );
    let (r, took) = within("the cold read", move || cold.join().unwrap());
    assert_eio(r, "a read of a chunk the registry holds back");
    assert!(took < Duration::from_secs(60), "EIO took {took:?}");

    // Released: the same read succeeds.
    gate.hold.store(false, Ordering::SeqCst);
    let source = noise(BIG, 1);
    let at = last_offset as usize + 10;
    assert_eq!(
        pread(&mnt.join("big.bin"), last_offset + 10, 4096).unwrap(),
        source[at..at + 4096]
    );
}

#[test]
fn a_corrupt_chunk_gives_eio_and_never_wrong_bytes() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let big = big_chunks(&reg, "ns/vol", &hex);
    let (bad, bad_offset, bad_len) = big[1].clone();
    let proxy = FlipProxy::start_only(&reg, std::slice::from_ref(&bad));
    let cache = sb.path().join("c");
    let mnt = mountpoint(&sb, "mnt");
    let mut m = Mounted::start(
        &sb,
        &proxy.addr(),
        &["mount", "bdn:ns/vol", s(&mnt), "--cache-dir", s(&cache)],
        &[&mnt],
    );
    let source = noise(BIG, 1);
    let path = mnt.join("big.bin");

    // Bytes of the intact first chunk are served.
    assert_eq!(pread(&path, 1000, 4096).unwrap(), source[1000..5096]);
    // The corrupt chunk: EIO, every time (nothing wrong was kept).
    for _ in 0..2 {
        assert_eio(
            pread(&path, bad_offset + bad_len / 2, 4096),
            "a read inside the corrupt chunk",
        );
    }
    assert!(proxy.flipped() >= 2, "the proxy corrupted nothing");
    assert!(
        !cached_chunks(&cache).contains(&bad),
        "corrupt chunk cached"
    );

    // Reading the whole file in order: every byte returned is right, and
    // the read fails at the latest where the 1 MiB piece holding the
    // flipped byte begins. (Pieces of the chunk before it may be served:
    // the chain, the one check of a served byte, finds them right.)
    let (returned, err) = read_until_error(&path);
    let err = err.expect("reading past a corrupt chunk succeeded");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    let flipped = bad_offset + bad_len / 2;
    let piece = sealvol_spec::chain::PIECE;
    assert!(
        returned.len() as u64 <= flipped / piece * piece,
        "bytes of the corrupt piece were served"
    );
    assert!(returned == source[..returned.len()], "wrong bytes served");

    // Other files are intact.
    assert_eq!(read(&mnt.join("tokenizer.json")).unwrap(), noise(3000, 2));
    m.stop();
    let log = m.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("EIO") && l.contains(&bad) && l.contains("corrupt")),
        "no log line names the corrupt chunk:\n{log}"
    );
}

#[test]
fn prefetch_all_fills_the_cache_and_cache_size_bounds_it() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let all: BTreeSet<String> = sealvol_tests::chunk_blobs(&reg, "ns/vol", &format!("b3-{hex}"))
        .into_iter()
        .map(|(d, _)| d)
        .collect();

    // --cache-size: reading everything leaves at most that much cached.
    let small = sb.path().join("small-cache");
    let mnt = mountpoint(&sb, "mnt-small");
    let mut m = mount_volume(&sb, &reg, &mnt, s(&small), &["--cache-size", "8M"]);
    assert_same_tree(&src, &mnt);
    m.stop();
    let held: u64 = cached_chunks(&small)
        .iter()
        .map(|d| {
            let hex = d.trim_start_matches("sha256:");
            std::fs::metadata(small.join("chunks/sha256").join(&hex[..2]).join(hex))
                .unwrap()
                .len()
        })
        .sum();
    assert!(held <= 8 << 20, "the cache holds {held} bytes, over 8 MiB");

    // --prefetch all: every chunk arrives without a read; then the registry
    // can go away and the whole version still reads.
    let cache = sb.path().join("c");
    let mnt = mountpoint(&sb, "mnt");
    let _m = mount_volume(&sb, &reg, &mnt, s(&cache), &["--prefetch", "all"]);
    // A user's FUSE mount prefetches into the chunk cache; the fanotify
    // engine and a root FUSE mount into their one local copy of the files.
    let done = || cached_chunks(&cache) == all || sealvol_tests::layout_filled(&cache, &hex);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "prefetch fetched {} of {} chunks into the chunk cache, and the local copy is not filled",
            cached_chunks(&cache).len(),
            all.len(),
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    if sealvol_tests::layout_filled(&cache, &hex) {
        assert!(
            cached_chunks(&cache).is_empty(),
            "the prefetch wrote chunks to the chunk cache as well as to the local copy"
        );
    }
    serve.kill();
    assert_same_tree(&src, &mnt);
}

/// Waits (up to a minute) until every chunk in `want` went through `gate`.
fn wait_fetched(gate: &Gate, want: &BTreeSet<String>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let have = gate.blobs_got();
        if want.is_subset(&have) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {} chunks fetched",
            want.intersection(&have).count(),
            want.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn reads_in_order_and_opened_files_are_fetched_ahead() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let big: BTreeSet<String> = big_chunks(&reg, "ns/vol", &hex)
        .into_iter()
        .map(|(d, _, _)| d)
        .collect();
    // The version's chunks: a mount also GETs its tree index, a blob.
    let chunks: BTreeSet<String> = sealvol_tests::chunk_blobs(&reg, "ns/vol", &format!("b3-{hex}"))
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    let source = noise(BIG, 1);

    // Two reads in order from the start: the chunks after the first
    // arrive without being read, and nothing of other files.
    let cache = sb.path().join("c1");
    let mnt = mountpoint(&sb, "mnt1");
    let gate = Gate::start(&reg);
    let _m = mount_volume(&sb, &gate.addr(), &mnt, s(&cache), &[]);
    let path = mnt.join("big.bin");
    let head = within("two reads in order", move || {
        let mut f = File::open(&path).unwrap();
        let mut buf = vec![0u8; 256 << 10];
        f.read_exact(&mut buf[..128 << 10]).unwrap();
        f.read_exact(&mut buf[128 << 10..]).unwrap();
        buf
    });
    assert_eq!(head, source[..256 << 10]);
    wait_fetched(&gate, &big, "read-ahead");
    assert_eq!(
        gate.blobs_got()
            .intersection(&chunks)
            .cloned()
            .collect::<BTreeSet<_>>(),
        big,
        "read-ahead fetched other files"
    );

    // --prefetch open: one byte read, and the whole file arrives.
    let cache = sb.path().join("c2");
    let mnt = mountpoint(&sb, "mnt2");
    let gate = Gate::start(&reg);
    let _m = mount_volume(&sb, &gate.addr(), &mnt, s(&cache), &["--prefetch", "open"]);
    assert_eq!(
        pread(&mnt.join("big.bin"), 5000, 1).unwrap(),
        [source[5000]]
    );
    wait_fetched(&gate, &big, "prefetch open");
    assert_eq!(
        gate.blobs_got()
            .intersection(&chunks)
            .cloned()
            .collect::<BTreeSet<_>>(),
        big,
        "prefetch open fetched other files"
    );
}

#[test]
fn unmounting_leaves_no_stale_mount() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let cache = sb.path().join("c");
    let mnt = mountpoint(&sb, "mnt");

    // --daemon returns once the mount is ready; `sealvol umount` ends it.
    let mut daemon_cmd = sb.command(sealvol_bin());
    daemon_cmd.env("SEALVOL_REGISTRY", &reg).args([
        "mount",
        "--daemon",
        "bdn:ns/vol",
        s(&mnt),
        "--cache-dir",
        s(&cache),
    ]);
    let out = within("sealvol mount --daemon", move || {
        daemon_cmd.output().unwrap()
    });
    // The guard cleans up if anything below fails.
    let _guard = MountGuard(mnt.clone());
    let line = ok(out, "sealvol mount --daemon");
    assert!(
        line.starts_with("sealvol: mounted bdn:ns/vol@b3:"),
        "{line}"
    );
    assert!(is_mounted(&mnt));
    let daemon = mount_process(&mnt).expect("the daemon serving the mount");
    assert_eq!(
        read(&mnt.join("config.json")).unwrap(),
        b"{\"hidden_size\": 64}\n"
    );

    // A second mount on top is refused: it would hide this one, and
    // unmounting by path would take down whichever is on top.
    let line = fails(
        sb.sealvol(
            &reg,
            &["mount", "bdn:ns/vol", s(&mnt), "--cache-dir", s(&cache)],
        ),
        "a second mount on a mount point",
    );
    assert!(line.contains("already a mount point"), "{line}");
    assert_eq!(
        read(&mnt.join("config.json")).unwrap(),
        b"{\"hidden_size\": 64}\n",
        "the first mount was disturbed"
    );

    // Busy while a file is open: refused, unless lazily.
    let open = File::open(mnt.join("run.sh")).unwrap();
    let line = fails(sb.sealvol(&reg, &["umount", s(&mnt)]), "umount while busy");
    assert!(line.contains("busy"), "{line}");
    assert!(is_mounted(&mnt));
    drop(open);
    ok(sb.sealvol(&reg, &["umount", s(&mnt)]), "sealvol umount");
    assert!(!is_mounted(&mnt), "still mounted after sealvol umount");
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(daemon) {
        assert!(Instant::now() < deadline, "the daemon outlived its mount");
        std::thread::sleep(Duration::from_millis(50));
    }
    let line = fails(sb.sealvol(&reg, &["umount", s(&mnt)]), "umount twice");
    assert!(line.contains("not a sealvol mount"), "{line}");

    let m = mount_volume(&sb, &reg, &mnt, s(&cache), &[]);
    m.signal(libc::SIGKILL);
    if fanotify() {
        // The keeper takes the mount away when its process dies.
        let deadline = Instant::now() + Duration::from_secs(20);
        while is_mounted(&mnt) {
            assert!(Instant::now() < deadline, "the mount outlived its process");
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(m);
    } else {
        // A FUSE mount whose process crashed is stale until the guard clears
        // it. Attributes stay cached; listing a directory needs the process.
        let deadline = Instant::now() + Duration::from_secs(20);
        let err = loop {
            match std::fs::read_dir(&mnt) {
                Err(e) => break e,
                Ok(_) => assert!(Instant::now() < deadline, "the mount outlived its process"),
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            matches!(
                err.raw_os_error(),
                Some(libc::ENOTCONN | libc::ECONNABORTED)
            ),
            "{err}"
        );
        assert!(is_mounted(&mnt));
        drop(m);
        assert!(!is_mounted(&mnt), "the guard left a stale mount");
    }

    // A test that panics with a mount up leaves nothing behind.
    let (sb_ref, reg2, mnt2, cache2) = (&sb, reg.clone(), mnt.clone(), cache.clone());
    let pid = Arc::new(Mutex::new(0));
    let pid2 = pid.clone();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let m = Mounted::start(
            sb_ref,
            &reg2,
            &["mount", "bdn:ns/vol", s(&mnt2), "--cache-dir", s(&cache2)],
            &[&mnt2],
        );
        *pid2.lock().unwrap() = m.pid();
        panic!("a failing test");
    }));
    assert!(r.is_err());
    assert!(!is_mounted(&mnt), "a failed test left its mount");
    assert!(
        !alive(*pid.lock().unwrap()),
        "a failed test left its mount process"
    );

    // Mounts that cannot be made fail with one line and mount nothing.
    let line = fails(
        sb.sealvol(
            &reg,
            &["mount", "bdn:ns/vol", s(&sb.path().join("nowhere"))],
        ),
        "mount on a missing directory",
    );
    assert!(line.contains("create it first"), "{line}");
    let down = sealvol_tests::closed_addr();
    let line = fails(
        sb.sealvol(&down, &["mount", "bdn:ns/vol", s(&mnt), "--daemon"]),
        "mount --daemon from a registry that is down",
    );
    assert!(line.contains(&down), "{line}");
    assert!(!is_mounted(&mnt));
}

/// Lazily unmounts its path when dropped, whatever mounted it.
struct MountGuard(PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        if let Some(pid) = mount_process(&self.0) {
            // SAFETY: stopping the mount process this test started.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        force_unmount(&self.0);
    }
}

/// Whether process `pid` is running (a zombie is not).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The `sealvol mount` process whose arguments name `mountpoint`.
fn mount_process(mountpoint: &Path) -> Option<i32> {
    let want = mountpoint.to_str()?;
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let is_mount = args.iter().any(|a| *a == b"mount")
            && args.contains(&want.as_bytes())
            && args.first().is_some_and(|a| a.ends_with(b"sealvol"));
        (is_mount && alive(pid)).then_some(pid)
    })
}

#[test]
fn a_file_read_whole_is_passed_through_from_a_checked_copy_after_a_remount() {
    // A root mount keeps what it reads in one local copy, a sparse file
    // filled as it is read (no chunk-cache copy: each byte is written
    // once), in a folder only root can reach; later opens of a file wholly
    // filled hand it to the kernel (FUSE passthrough): after a remount the
    // file reads with the registry down, from the copy alone, while a
    // file never read cannot be read at all.
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let cache = sb.path().join("c");
    let mnt = mountpoint(&sb, "mnt");
    // A FUSE feature: the fanotify engine's files are local already.
    let mut m = mount_volume(&sb, &reg, &mnt, s(&cache), &["--engine", "fuse"]);
    let big = noise(BIG, 1);
    assert_eq!(read(&mnt.join("big.bin")).unwrap(), big);
    // Stopped, the mount records what it filled first.
    m.stop();

    let folder = cache.join("fanotify").join(&hex);
    let copy = folder.join("tree/big.bin");
    assert!(
        std::fs::read(&copy).unwrap() == big,
        "the local copy of big.bin differs"
    );
    assert_eq!(
        std::fs::metadata(&copy).unwrap().uid(),
        0,
        "the copy is root's"
    );
    let base = std::fs::metadata(cache.join("fanotify")).unwrap();
    assert_eq!(base.mode() & 0o777, 0o700, "only root reaches the copies");
    assert!(
        cached_chunks(&cache).is_empty(),
        "a read wrote its chunks to the chunk cache as well as to the copy"
    );

    let mnt2 = mountpoint(&sb, "mnt2");
    let _m2 = mount_volume(
        &sb,
        &reg,
        &mnt2,
        s(&cache),
        &["--fetch-timeout", "2", "--engine", "fuse"],
    );
    serve.kill();
    assert_eq!(
        within("a passthrough read", {
            let p = mnt2.join("big.bin");
            move || read(&p).unwrap()
        }),
        big,
        "big.bin through the copy"
    );
    assert_eio(
        within("a read with the registry down", {
            let p = mnt2.join("tokenizer.json");
            move || read(&p)
        }),
        "tokenizer.json, never read whole, with the registry down",
    );
}
