//! `sealvol mount --engine fanotify` as a user meets it: the kernel serves
//! the version from local files that the mount fills on demand through
//! fanotify pre-content events (issue 32). The version reads back byte for
//! byte (through `read` and `mmap`), what was filled stays filled for the
//! next mount, a forged chunk list gives `EIO`, and a mount process killed
//! while a read waits on it never lets that read, or a later one through a
//! held descriptor or a mapping, see the zeros of an unfilled hole.
//!
//! These need root and a kernel with pre-content events (Linux 6.14+), as
//! CI has; they fail, not skip, without them.

use std::fs::File;
use std::os::unix::fs::{symlink, FileExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sealvol_spec::chain::PIECE;
use sealvol_spec::EntryData;
use sealvol_tests::forge::{chunks_of, Mirror};
use sealvol_tests::fuse::{
    assert_eio, is_mounted, mountpoint, pread, read, read_until_error, within, Mounted,
};
use sealvol_tests::{
    cached_chunks, fanotify_marks, gets_served, host, noise, push_hex, s, write, DockerRegistry,
    Gate, Sandbox, Server,
};

const MIB: usize = PIECE as usize;
/// Several pieces and several chunks, the last piece short.
const BIG: usize = 40 * MIB + 777;

fn sample(root: &Path) {
    write(&root.join("big.bin"), &noise(BIG, 1), 0o644);
    write(&root.join("config.json"), b"{\"hidden_size\": 64}\n", 0o644);
    write(&root.join("tokenizer.json"), &noise(3000, 2), 0o444);
    write(&root.join("empty"), b"", 0o644);
    write(&root.join("secret.key"), b"not for everyone\n", 0o600);
    write(&root.join("run.sh"), b"#!/bin/sh\necho hi\n", 0o755);
    write(&root.join("nested/deeper/notes.txt"), b"deep\n", 0o644);
    std::fs::create_dir_all(root.join("emptydir")).unwrap();
    symlink("nested/deeper/notes.txt", root.join("link")).unwrap();
    for (dir, mode) in [("", 0o755), ("nested/deeper", 0o750), ("emptydir", 0o700)] {
        std::fs::set_permissions(root.join(dir), std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// `sealvol mount --engine fanotify REF MNT --cache-dir CACHE EXTRA…`,
/// checked to have said it chose fanotify.
fn mount_fanotify(
    sb: &Sandbox,
    registry: &str,
    reference: &str,
    mnt: &Path,
    cache: &Path,
    extra: &[&str],
) -> Mounted {
    let mut args = vec![
        "mount",
        reference,
        s(mnt),
        "--cache-dir",
        s(cache),
        "--engine",
        "fanotify",
    ];
    args.extend_from_slice(extra);
    let m = Mounted::start(sb, registry, &args, &[mnt]);
    // stderr comes through its own pipe, maybe in pieces: wait for the
    // whole line.
    let line_done = |e: String| {
        e.split_once("sealvol: engine: ")
            .is_some_and(|(_, rest)| rest.contains('\n'))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !line_done(m.stderr()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        m.stderr()
            .contains("sealvol: engine: fanotify (kernel pre-content events)"),
        "the engine line: {:?} {}",
        m.stdout(),
        m.stderr()
    );
    m
}

/// The bytes of `path` through a read-only shared mapping.
fn mmap_read(path: &Path) -> Vec<u8> {
    use std::os::fd::AsRawFd as _;
    let f = File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    // SAFETY: a read-only private view of a file we keep open while
    // copying out of it; unmapped before returning.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap {}", path.display());
        let out = std::slice::from_raw_parts(p as *const u8, len).to_vec();
        libc::munmap(p, len);
        out
    }
}

#[test]
fn a_fanotify_mount_reads_back_its_source_and_keeps_what_it_filled() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let reference = format!("bdn:ns/vol@b3:{hex}");
    let cache = sb.path().join("cache");
    let mnt = mountpoint(&sb, "mnt");

    let mut m = mount_fanotify(&sb, &reg, &reference, &mnt, &cache, &[]);
    assert_eq!(
        m.ready(),
        [format!("sealvol: mounted {reference} at {}", mnt.display())]
    );
    // Mounted read-only.
    let err = File::create(mnt.join("new")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");

    // A read in the middle first: only its pieces are filled.
    let big = noise(BIG, 1);
    let at = 17 * MIB + 5;
    assert_eq!(
        pread(&mnt.join("big.bin"), at as u64, 10_000).unwrap(),
        big[at..at + 10_000]
    );
    // Names, modes, link targets and every byte.
    let (a, b) = (src.clone(), mnt.clone());
    within("comparing the trees", move || {
        sealvol_tests::assert_same_tree(&a, &b)
    });
    assert_eq!(mmap_read(&mnt.join("big.bin")), big);

    // Every file is filled now: once that is recorded, the group's marks
    // go, and reads and faults no longer reach the mount process. Stopped,
    // it cannot answer; reads still complete.
    let pid = m.pid();
    within("the marks to go", move || {
        while fanotify_marks(pid) > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    m.signal(libc::SIGSTOP);
    let (tx, rx) = std::sync::mpsc::channel();
    let (b, path) = (big.clone(), mnt.join("big.bin"));
    std::thread::spawn(move || {
        let ok = read(&path).is_ok_and(|r| r == b) && mmap_read(&path) == b;
        let _ = tx.send(ok);
    });
    let got = rx.recv_timeout(Duration::from_secs(20));
    m.signal(libc::SIGCONT);
    assert_eq!(
        got,
        Ok(true),
        "a read of a filled version waited on the stopped mount process"
    );
    m.stop();
    assert!(!is_mounted(&mnt), "the mount is gone after a clean stop");

    // A second mount of the version refetches nothing it filled: its reads
    // reach the registry not once (only the mount's own resolve does).
    let m = mount_fanotify(&sb, &reg, &reference, &mnt, &cache, &[]);
    // Reading the metrics is a GET too: count what one costs.
    let first = gets_served(&reg);
    let before = gets_served(&reg);
    let own = before - first;
    assert_eq!(read(&mnt.join("big.bin")).unwrap(), big);
    assert_eq!(mmap_read(&mnt.join("big.bin")), big);
    assert_eq!(read(&mnt.join("tokenizer.json")).unwrap(), noise(3000, 2));
    assert_eq!(
        gets_served(&reg) - before,
        own,
        "filled bytes were fetched again"
    );
    // `sealvol umount` knows it for a sealvol mount, and the process ends.
    let out = sb.sealvol(&reg, &["umount", s(&mnt)]);
    assert!(
        out.status.success(),
        "umount: {}",
        sealvol_tests::stderr(&out)
    );
    let pid = m.pid();
    within("the mount process to end after umount", move || {
        while !exited(pid) {
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    assert!(!is_mounted(&mnt));
    assert!(m.stdout().contains("sealvol: unmounted"), "{}", m.stdout());
}

/// Whether process `pid` (our child) has ended: gone, or a zombie.
fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => true,
    }
}

/// Four pieces, the last one short; `big2.bin` differs in its first MiB
/// only, so both files cut alike (FastCDC looks at no byte before 1 MiB).
fn forge_sample(root: &Path) -> (Vec<u8>, Vec<u8>) {
    let big1 = noise(3 * MIB + 4321, 11);
    let mut big2 = big1.clone();
    big2[..MIB].copy_from_slice(&noise(MIB, 12));
    write(&root.join("big1.bin"), &big1, 0o644);
    write(&root.join("big2.bin"), &big2, 0o644);
    write(&root.join("config.json"), b"{\"hidden_size\": 64}\n", 0o644);
    (big1, big2)
}

#[test]
fn a_forged_chunk_list_gives_eio_through_the_fanotify_engine() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    let (good, other) = forge_sample(&src);
    let docker = DockerRegistry::start();
    let reg = docker.addr();
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let pinned = format!("bdn:ns/vol@b3:{hex}");
    let mirror = Mirror::new(&reg);
    let before = mirror.fetch("ns/vol", &hex);
    let c2 = chunks_of(&before.tree, "big2.bin");
    // big1.bin's first chunk is now big2.bin's: a blob the registry has,
    // of the right length and sha256; the tree stays valid under the
    // pinned digest. Only the per-piece check can catch it.
    let swapped = c2[0].sha256;
    let built = mirror.forge("ns/vol", &hex, |entries| {
        for e in entries.iter_mut().filter(|e| e.path == "big1.bin") {
            if let EntryData::File { chunks, .. } = &mut e.data {
                chunks[0].sha256 = swapped;
            }
        }
    });
    assert_eq!(built.digest.hex(), hex);

    let mnt = mountpoint(&sb, "mnt");
    let cache = sb.path().join("cache");
    let mut m = mount_fanotify(&sb, &reg, &pinned, &mnt, &cache, &[]);
    let path = mnt.join("big1.bin");
    for offset in [0, MIB as u64 / 2, 0] {
        assert_eio(
            pread(&path, offset, 4096),
            &format!("a read of big1.bin at {offset}, in the forged piece"),
        );
    }
    let (returned, err) = read_until_error(&path);
    let err = err.expect("reading big1.bin through the forged piece succeeded");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(
        returned.is_empty() || returned == good[..returned.len()],
        "{} wrong bytes served",
        returned.len()
    );
    // An mmap of it fails too (the kernel asks for the whole mapping).
    let f = File::open(&path).unwrap();
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: a mapping we only check for failure; unmapped if made.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                good.len(),
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        let e = std::io::Error::last_os_error();
        if p != libc::MAP_FAILED {
            // SAFETY: unmapping what we mapped.
            unsafe { libc::munmap(p, good.len()) };
            panic!("mmap of a file with a forged piece succeeded");
        }
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "mmap: {e}");
    }
    // Pieces that verify are served, and right; other files read.
    assert_eq!(
        pread(&path, 2 * PIECE + 10, 4096).unwrap(),
        good[2 * MIB + 10..2 * MIB + 10 + 4096]
    );
    assert_eq!(read(&mnt.join("big2.bin")).unwrap(), other);
    assert_eq!(
        read(&mnt.join("config.json")).unwrap(),
        b"{\"hidden_size\": 64}\n"
    );
    m.stop();
}

/// What a read after the kill may give: an error, or the end of the file
/// (the keeper truncated what it could not vouch for); never bytes.
fn assert_no_bytes(r: std::io::Result<Vec<u8>>, what: &str) {
    match r {
        Err(_) => {}
        Ok(b) => assert!(
            b.is_empty(),
            "{what}: {} bytes served after the mount process died (zeros: {})",
            b.len(),
            b.iter().all(|&x| x == 0)
        ),
    }
}

#[test]
fn a_killed_mount_process_never_lets_a_read_see_zeros() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let reference = format!("bdn:ns/vol@b3:{hex}");
    let gate = Gate::start(&reg);
    let cache = sb.path().join("cache");
    let big = noise(BIG, 1);

    // (a) A read through a held descriptor waits on the registry when the
    // mount process is killed.
    let mnt = mountpoint(&sb, "mnt");
    let m = mount_fanotify(
        &sb,
        &gate.addr(),
        &reference,
        &mnt,
        &cache,
        &["--fetch-timeout", "100"],
    );
    // One piece filled before, which later reads may still see.
    assert_eq!(pread(&mnt.join("big.bin"), 0, 4096).unwrap(), big[..4096]);
    let held = File::open(mnt.join("big.bin")).unwrap();
    let held = Arc::new(held);
    gate.hold.store(true, Ordering::SeqCst);
    let waiting = {
        let f = Arc::clone(&held);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            f.read_at(&mut buf, 20 * PIECE + 3).map(|n| {
                buf.truncate(n);
                buf
            })
        })
    };
    std::thread::sleep(Duration::from_millis(700));
    assert!(!waiting.is_finished(), "the cold read did not wait");
    m.signal(libc::SIGKILL);
    let r = within("the read pending at the kill", move || {
        waiting.join().unwrap()
    });
    assert_eio(r, "a read pending when the mount process was killed");
    // Later reads through the held descriptor: an error or the end of the
    // file, never the hole's zeros (the registry is released: a read that
    // reached a live mount would get bytes).
    gate.hold.store(false, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    for at in [20 * PIECE + 3, 30 * PIECE, 3] {
        let f = Arc::clone(&held);
        let r = within("a read after the kill", move || {
            let mut buf = vec![0u8; 4096];
            f.read_at(&mut buf, at).map(|n| {
                buf.truncate(n);
                buf
            })
        });
        assert_no_bytes(r, &format!("a read at {at} through the held descriptor"));
    }
    drop(held);
    drop(m);
    assert!(!is_mounted(&mnt), "the killed mount was left attached");

    // A new mount lays the version out again and reads it right.
    let mut m = mount_fanotify(&sb, &gate.addr(), &reference, &mnt, &cache, &[]);
    assert_eq!(read(&mnt.join("big.bin")).unwrap(), big);
    m.stop();

    // (b) An mmap, whose pre-content event asks for the whole mapping,
    // waits on the registry when the mount process is killed: it fails,
    // and nothing is ever mapped from a hole. In a child process, so
    // that a SIGBUS cannot take the test down.
    let cache2 = sb.path().join("cache2");
    let m = mount_fanotify(
        &sb,
        &gate.addr(),
        &reference,
        &mnt,
        &cache2,
        &["--fetch-timeout", "100"],
    );
    gate.hold.store(true, Ordering::SeqCst);
    let probe = format!(
        "import mmap,sys\nf=open(sys.argv[1],'rb')\ntry:\n m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\nexcept OSError as e:\n print('error',e.errno); sys.exit(3)\nprint('mapped', m[{at}:{at}+64].hex())\n",
        at = 25 * MIB
    );
    let child = std::process::Command::new("python3")
        .args(["-c", &probe, s(&mnt.join("big.bin"))])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    std::thread::sleep(Duration::from_millis(1500));
    m.signal(libc::SIGKILL);
    let out = within("the mmap pending at the kill", move || {
        child.wait_with_output().unwrap()
    });
    gate.hold.store(false, Ordering::SeqCst);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let want = big[25 * MIB..25 * MIB + 64]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    assert!(
        stdout.trim() == format!("error {}", libc::EIO)
            || stdout.trim() == format!("mapped {want}"),
        "the mmap after the kill: {stdout:?} {:?} ({:?})",
        String::from_utf8_lossy(&out.stderr),
        out.status
    );
    assert!(
        !stdout.contains(&"00".repeat(64)),
        "zeros were mapped: {stdout}"
    );
    drop(m);
}

#[test]
fn cache_size_counts_filled_files_and_trims_unused_versions() {
    let sb = Sandbox::new();
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let (a, b) = (sb.path().join("a"), sb.path().join("b"));
    write(&a.join("w.bin"), &noise(8 * MIB, 21), 0o644);
    write(&b.join("w.bin"), &noise(8 * MIB, 22), 0o644);
    let hex_a = push_hex(&sb, &reg, &a, "bdn:ns/a", &[]);
    let hex_b = push_hex(&sb, &reg, &b, "bdn:ns/b", &[]);
    let cache = sb.path().join("cache");
    let mnt = mountpoint(&sb, "mnt");
    let folder = |hex: &str| cache.join("fanotify").join(hex);
    let bound = ["--cache-size", "6M"];

    let m = mount_fanotify(&sb, &reg, "bdn:ns/a", &mnt, &cache, &bound);
    assert_eq!(read(&mnt.join("w.bin")).unwrap(), noise(8 * MIB, 21));
    drop(m);
    assert!(folder(&hex_a).join("tree/w.bin").exists());
    assert!(
        cached_chunks(&cache).is_empty(),
        "a read through the fanotify engine wrote its chunks to the chunk cache too"
    );

    // Version a's 8 MiB of filled file (its only copy: a read fills the
    // file and keeps no chunk) is past 6 MiB: the next mount removes a's
    // folder, which no mount holds.
    let m = mount_fanotify(&sb, &reg, "bdn:ns/b", &mnt, &cache, &bound);
    assert!(
        !folder(&hex_a).exists(),
        "the unused version folder was kept past --cache-size"
    );
    assert!(folder(&hex_b).exists());
    assert_eq!(read(&mnt.join("w.bin")).unwrap(), noise(8 * MIB, 22));

    // A folder in use is never trimmed: mounting a again while b is
    // mounted leaves b's in place.
    let mnt2 = mountpoint(&sb, "mnt2");
    let m2 = mount_fanotify(&sb, &reg, "bdn:ns/a", &mnt2, &cache, &bound);
    assert!(folder(&hex_b).join("tree/w.bin").exists());
    assert_eq!(read(&mnt.join("w.bin")).unwrap(), noise(8 * MIB, 22));
    assert_eq!(read(&mnt2.join("w.bin")).unwrap(), noise(8 * MIB, 21));
    drop(m2);
    drop(m);
}

/// The keeper process of mount process `pid` (its child `sealvol-keeper`,
/// forked from whichever of its threads). A child just forked may not
/// have taken its name yet: look for a few seconds.
fn keeper_of(pid: i32) -> i32 {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let children: String = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
            .collect::<Vec<_>>()
            .join(" ");
        let keeper = children
            .split_whitespace()
            .filter_map(|c| c.parse::<i32>().ok())
            .find(|c| {
                std::fs::read_to_string(format!("/proc/{c}/comm"))
                    .is_ok_and(|comm| comm.trim() == "sealvol-keeper")
            });
        match keeper {
            Some(k) => return k,
            None if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            None => panic!("no keeper among the children of {pid}: {children:?}"),
        }
    }
}

#[test]
fn a_killed_keeper_fails_the_mount_closed_too() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let reference = format!("bdn:ns/vol@b3:{hex}");
    let gate = Gate::start(&reg);
    let cache = sb.path().join("cache");
    let mnt = mountpoint(&sb, "mnt");
    let m = mount_fanotify(
        &sb,
        &gate.addr(),
        &reference,
        &mnt,
        &cache,
        &["--fetch-timeout", "100"],
    );
    let keeper = keeper_of(m.pid());
    let held = Arc::new(File::open(mnt.join("big.bin")).unwrap());
    gate.hold.store(true, Ordering::SeqCst);
    let waiting = {
        let f = Arc::clone(&held);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            f.read_at(&mut buf, 12 * PIECE).map(|n| {
                buf.truncate(n);
                buf
            })
        })
    };
    std::thread::sleep(Duration::from_millis(700));
    assert!(!waiting.is_finished(), "the cold read did not wait");
    // SAFETY: signalling a process this test started (through sealvol).
    unsafe { libc::kill(keeper, libc::SIGKILL) };
    let r = within("the read pending when the keeper died", move || {
        waiting.join().unwrap()
    });
    assert_eio(r, "a read pending when the keeper was killed");
    gate.hold.store(false, Ordering::SeqCst);
    // The mount process took the mount away and settled the files; later
    // reads through the held descriptor see no bytes.
    within("the mount to go", {
        let mnt = mnt.clone();
        move || {
            while is_mounted(&mnt) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    });
    for at in [12 * PIECE, 30 * PIECE, 0] {
        let f = Arc::clone(&held);
        let r = within("a read after the keeper died", move || {
            let mut buf = vec![0u8; 4096];
            f.read_at(&mut buf, at).map(|n| {
                buf.truncate(n);
                buf
            })
        });
        assert_no_bytes(r, &format!("a read at {at} after the keeper died"));
    }
    let pid = m.pid();
    drop(m);
    assert!(exited(pid));
    drop(held);
    // A new mount serves the version again.
    let m = mount_fanotify(&sb, &gate.addr(), &reference, &mnt, &cache, &[]);
    assert_eq!(read(&mnt.join("big.bin")).unwrap(), noise(BIG, 1));
    drop(m);
}

/// Waits (a little) until `m` has written a whole `sealvol: engine: …`
/// line on stderr, and returns it.
fn engine_line(m: &Mounted) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let e = m.stderr();
        if let Some((_, rest)) = e.split_once("sealvol: engine: ") {
            if let Some((line, _)) = rest.split_once('\n') {
                return line.to_string();
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no engine line: {e:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn auto_chooses_fanotify_as_root_and_fuse_stays_available() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "these tests run as root");
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let cache = sb.path().join("cache");
    for (engine, want, fuse) in [
        ("auto", "fanotify (kernel pre-content events)", false),
        ("fuse", "fuse (asked for)", true),
    ] {
        let mnt = mountpoint(&sb, &format!("mnt-{engine}"));
        let m = Mounted::start(
            &sb,
            &reg,
            &[
                "mount",
                "bdn:ns/vol",
                s(&mnt),
                "--cache-dir",
                s(&cache),
                "--engine",
                engine,
            ],
            &[&mnt],
        );
        assert_eq!(engine_line(&m), want, "--engine {engine}");
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let line = info
            .lines()
            .find(|l| l.split(' ').nth(4) == Some(s(&mnt)))
            .unwrap_or_else(|| panic!("{} not mounted", mnt.display()));
        let kind = line.split_once(" - ").unwrap().1.split(' ').next().unwrap();
        // fanotify: a bind mount of the cache folder's file system.
        assert_eq!(kind.starts_with("fuse"), fuse, "--engine {engine}: {line}");
        assert_eq!(read(&mnt.join("big.bin")).unwrap(), noise(BIG, 1));
        drop(m);
    }
}

/// A mount made by the test (`mount --bind`, an overlay), detached when
/// dropped, even when the test fails.
struct Attached(std::path::PathBuf);

impl Attached {
    /// `mount ARGS… AT`; AT is made a folder unless it exists.
    fn mount(args: &[&str], at: &Path) -> Attached {
        if !at.exists() {
            std::fs::create_dir_all(at).unwrap();
        }
        let out = std::process::Command::new("mount")
            .args(args)
            .arg(at)
            .output()
            .expect("mount");
        assert!(
            out.status.success(),
            "mount {args:?} {}: {}",
            at.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Attached(at.to_path_buf())
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A container runtime gives a volume to a container as a bind mount of
/// the mountpoint (or of one file of it: a subPath), and an image volume
/// is an overlay's lower layer: each is another mount of the same files.
/// Reads through every one of them are filled before they are allowed,
/// and once the mount process is gone (unmounted, or killed), such a
/// mount that outlives it never reads an unfilled hole as zeros.
#[test]
fn bind_mounts_and_overlays_of_a_fanotify_mount_never_read_its_holes() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let reference = format!("bdn:ns/vol@b3:{hex}");
    let big = noise(BIG, 1);
    let mnt = mountpoint(&sb, "mnt");
    let at = |p: usize| (p * MIB) as u64;

    for (round, kill) in [(0, false), (1, true)] {
        let cache = sb.path().join(format!("cache{round}"));
        let mut m = mount_fanotify(&sb, &reg, &reference, &mnt, &cache, &[]);
        let bind = Attached::mount(&["--bind", s(&mnt)], &sb.path().join("bind"));
        // A file bind mount needs a file to mount on.
        write(&sb.path().join("file"), b"", 0o644);
        let file = Attached::mount(
            &["--bind", s(&mnt.join("big.bin"))],
            &sb.path().join("file"),
        );
        let upper = sb.path().join(format!("upper{round}"));
        let work = sb.path().join(format!("work{round}"));
        std::fs::create_dir_all(&upper).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        let overlay = Attached::mount(
            &[
                "-t",
                "overlay",
                "overlay",
                "-o",
                &format!(
                    "lowerdir={},upperdir={},workdir={}",
                    mnt.display(),
                    upper.display(),
                    work.display()
                ),
            ],
            &sb.path().join("overlay"),
        );

        // Cold reads through each: the right bytes.
        let same = |got: std::io::Result<Vec<u8>>, want: &[u8], what: &str| {
            let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(
                got == want,
                "{what}: wrong bytes ({} read, all zeros: {})",
                got.len(),
                got.iter().all(|&b| b == 0)
            );
        };
        same(
            pread(&bind.0.join("big.bin"), at(17) + 5, 10_000),
            &big[17 * MIB + 5..17 * MIB + 10_005],
            "through a bind mount",
        );
        same(
            pread(&file.0, at(9), 4096),
            &big[9 * MIB..9 * MIB + 4096],
            "through a bind mount of the file",
        );
        same(
            pread(&overlay.0.join("big.bin"), at(25), 4096),
            &big[25 * MIB..25 * MIB + 4096],
            "through an overlay",
        );
        same(
            read(&overlay.0.join("tokenizer.json")),
            &noise(3000, 2),
            "through an overlay",
        );
        let held = File::open(bind.0.join("big.bin")).unwrap();
        drop(overlay);

        if kill {
            m.signal(libc::SIGKILL);
            drop(m);
        } else {
            m.stop();
        }
        assert!(!is_mounted(&mnt), "the mountpoint outlived its mount");
        // The bind mounts remain. What was wholly filled reads right; an
        // unfilled range reads as an error or the end of the file, through
        // a new descriptor or the one held across the exit.
        assert_eq!(
            read(&bind.0.join("tokenizer.json")).unwrap(),
            noise(3000, 2)
        );
        for path in [bind.0.join("big.bin"), file.0.clone()] {
            assert_no_bytes(
                pread(&path, at(33), 4096),
                &format!(
                    "round {round}: a read of {} after the mount went",
                    path.display()
                ),
            );
        }
        let r = within("a read through the held descriptor", move || {
            let mut buf = vec![0u8; 4096];
            held.read_at(&mut buf, at(35)).map(|n| {
                buf.truncate(n);
                buf
            })
        });
        assert_no_bytes(r, &format!("round {round}: the held descriptor"));
    }

    // A new mount lays the version out again and reads it right, also
    // through a bind mount.
    let mut m = mount_fanotify(&sb, &reg, &reference, &mnt, &sb.path().join("cache1"), &[]);
    let bind = Attached::mount(&["--bind", s(&mnt)], &sb.path().join("bind2"));
    assert_eq!(read(&bind.0.join("big.bin")).unwrap(), big);
    drop(bind);
    m.stop();
}

/// This engine keeps a chunk's bytes only in the layout of the version
/// read (no chunk-cache copy), so a second version sharing files with one
/// filled before takes those chunks from the first one's files: it
/// downloads only what changed.
#[test]
fn a_new_version_takes_the_chunks_an_earlier_one_filled_instead_of_fetching_them() {
    let sb = Sandbox::new();
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let (one, two) = (sb.path().join("one"), sb.path().join("two"));
    let shared = noise(12 * MIB + 5, 31);
    write(&one.join("shard-1.bin"), &shared, 0o644);
    write(&one.join("shard-2.bin"), &noise(3 * MIB, 32), 0o644);
    write(&two.join("shard-1.bin"), &shared, 0o644);
    write(&two.join("shard-2.bin"), &noise(3 * MIB, 33), 0o644);
    let hex1 = push_hex(&sb, &reg, &one, "bdn:ns/m", &[]);
    let hex2 = push_hex(&sb, &reg, &two, "bdn:ns/m", &[]);
    let chunks = |hex: &str| -> std::collections::BTreeSet<String> {
        sealvol_tests::chunk_blobs(&reg, "ns/m", &format!("b3-{hex}"))
            .into_iter()
            .map(|(d, _)| d)
            .collect()
    };
    let (first, second) = (chunks(&hex1), chunks(&hex2));
    let only_second: std::collections::BTreeSet<String> =
        second.difference(&first).cloned().collect();
    assert!(!only_second.is_empty() && second.len() > only_second.len());
    let cache = sb.path().join("cache");
    let mnt = mountpoint(&sb, "mnt");

    let mut m = mount_fanotify(&sb, &reg, &format!("bdn:ns/m@b3:{hex1}"), &mnt, &cache, &[]);
    assert_eq!(read(&mnt.join("shard-1.bin")).unwrap(), shared);
    m.stop();

    let gate = Gate::start(&reg);
    let mut m = mount_fanotify(
        &sb,
        &gate.addr(),
        &format!("bdn:ns/m@b3:{hex2}"),
        &mnt,
        &cache,
        &[],
    );
    assert_eq!(read(&mnt.join("shard-1.bin")).unwrap(), shared);
    assert_eq!(read(&mnt.join("shard-2.bin")).unwrap(), noise(3 * MIB, 33));
    let got: std::collections::BTreeSet<String> =
        gate.blobs_got().intersection(&second).cloned().collect();
    assert_eq!(
        got, only_second,
        "the second version downloaded chunks the first one had filled"
    );
    m.stop();
}
