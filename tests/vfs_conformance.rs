//! The simulated file system (alone and behind the fault-injecting wrapper) answers every operation the writer uses exactly as the real one does: same results, same bytes, same errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;
use std::sync::Arc;
use zrecord::testing::{StdFs, Vfs};
use zrecord::Error;
use zrecord_testing::{FaultFs, SimFs};

/// An observable outcome: `Ok` with a description, or the error's kind.
fn obs<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(Error::Io { source, .. }) => format!("io {:?}", source.kind()),
        Err(Error::WriterBusy { .. }) => "busy".to_string(),
        Err(e) => format!("other {e}"),
    }
}

/// Runs every operation the writer uses under `root` and records what each returned.
fn script(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let p = |s: &str| root.join(s);
    let mut out = Vec::new();
    let mut log = |what: &str, o: String| out.push(format!("{what}: {o}"));
    log("mkdir", obs(vfs.create_dir_all(&p("d/sub"))));
    log("mkdir again", obs(vfs.create_dir_all(&p("d/sub"))));
    log("exists dir", obs(vfs.exists(&p("d"))));
    log("exists missing", obs(vfs.exists(&p("nope"))));
    log("open missing", obs(vfs.open_read(&p("d/a")).map(|_| ())));
    let a = vfs.create_new(&p("d/a")).unwrap();
    log(
        "create_new twice",
        obs(vfs.create_new(&p("d/a")).map(|_| ())),
    );
    log("write", obs(a.write_all_at(b"hello", 0)));
    log("write past end", obs(a.write_all_at(b"world", 10)));
    log("len", obs(a.len()));
    let mut buf = [0u8; 15];
    log("read", obs(a.read_exact_at(&mut buf, 0).map(|()| buf)));
    let mut big = [0u8; 16];
    log("read past end", obs(a.read_exact_at(&mut big, 0)));
    log("map", obs(a.map_prefix(7).map(|m| m.bytes().to_vec())));
    log("set_len shrink", obs(a.set_len(3)));
    log("len after shrink", obs(a.len()));
    log("set_len grow", obs(a.set_len(6)));
    log("sync", obs(a.sync_data()));
    log("sync all", obs(a.sync_all()));
    log("read whole", obs(vfs.read(&p("d/a"))));
    drop(a);
    let r = vfs.open_read(&p("d/a")).unwrap();
    log("write read-only", obs(r.write_all_at(b"x", 0)));
    drop(r);
    let rw = vfs.open_rw(&p("d/a")).unwrap();
    log("write rw", obs(rw.write_all_at(b"X", 0)));
    drop(rw);
    let t = vfs.create_truncate(&p("d/a")).unwrap();
    log("truncated len", obs(t.len()));
    log("write t", obs(t.write_all_at(b"new", 0)));
    drop(t);
    vfs.create_new(&p("d/b"))
        .unwrap()
        .write_all_at(b"bee", 0)
        .unwrap();
    log("rename over", obs(vfs.rename(&p("d/b"), &p("d/a"))));
    log("read renamed", obs(vfs.read(&p("d/a"))));
    log("read old name", obs(vfs.read(&p("d/b"))));
    log("rename missing", obs(vfs.rename(&p("d/b"), &p("d/c"))));
    let mut names = vfs.read_dir(&p("d")).unwrap();
    names.sort();
    log("list", format!("{names:?}"));
    log("list missing", obs(vfs.read_dir(&p("nope"))));
    log("sync dir", obs(vfs.sync_dir(&p("d"))));
    log("remove", obs(vfs.remove_file(&p("d/a"))));
    log("remove again", obs(vfs.remove_file(&p("d/a"))));
    // Renames stay inside one directory, as the writer's do (the simulation refuses the
    // others with EXDEV: their durability would involve two directories).
    vfs.create_dir_all(&p("d/e/x")).unwrap();
    vfs.create_new(&p("d/e/x/f")).unwrap();
    log(
        "rename dir over empty",
        obs(vfs.rename(&p("d/e"), &p("d/sub"))),
    );
    log("moved file", obs(vfs.exists(&p("d/sub/x/f"))));
    log("remove tree", obs(vfs.remove_dir_all(&p("d/sub"))));
    log("tree gone", obs(vfs.exists(&p("d/sub/x/f"))));
    let l = vfs.lock(&p("d/lock")).unwrap();
    log("lock twice", obs(vfs.lock(&p("d/lock")).map(|_| ())));
    drop(l);
    log(
        "lock after release",
        obs(vfs.lock(&p("d/lock")).map(|_| ())),
    );
    out
}

#[test]
fn simulation_matches_the_real_file_system() {
    let tmp = tempfile::tempdir().unwrap();
    let real = script(&StdFs, tmp.path());

    let sim = SimFs::new();
    sim.mkdir_durable(Path::new("/r")).unwrap();
    let simulated = script(&sim, Path::new("/r"));
    assert_eq!(sim.open_handles(), 0);

    let sim2 = SimFs::new();
    sim2.mkdir_durable(Path::new("/r")).unwrap();
    let wrapped = script(&FaultFs::new(Arc::new(sim2.clone())), Path::new("/r"));
    assert_eq!(sim2.open_handles(), 0);

    for (i, line) in real.iter().enumerate() {
        println!("{line}");
        assert_eq!(&simulated[i], line, "simulated differs at step {i}");
        assert_eq!(&wrapped[i], line, "wrapped differs at step {i}");
    }
    assert_eq!(real.len(), simulated.len());
}
