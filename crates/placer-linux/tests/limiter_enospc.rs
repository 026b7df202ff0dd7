//! Issue 36 item 4, end to end: a journal save that fails for want of space (ENOSPC on a
//! 64 KiB tmpfs made for the test) leaves the tc limiter uninstalled and nothing of it in
//! memory, and once space is freed the same actuator installs it on the next cycle. Before
//! the rollback, the unsaved journal entry stayed in memory and the limiter adopted it, so it
//! never installed until a restart. Root, a veth pair in namespaces of its own; everything
//! (mount, namespaces, qdiscs) is removed even when the test fails.

use placer_core::plan::{Action, Direction, FlowMatch, Outcome, Plan};
use placer_linux::actuator::Actuator;
use placer_linux::knobs::tc::{has_ingress, root_is_default, show_qdiscs, TcCtx};
use placer_linux::testnet::VethPair;
use std::path::Path;

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn enospc_then_space_freed_the_limiter_installs() {
    placer_testkit::require_root();
    if let Some(why) = placer_linux::testnet::unavailable_reason() {
        placer_testkit::skip(&why);
        return;
    }
    let Some(fs) = placer_testkit::SmallTmpfs::mount("limiter-enospc", "64k") else {
        placer_testkit::skip("cannot mount a tmpfs");
        return;
    };
    let mnt = fs.path().to_path_buf();
    let pair = VethPair::new().expect("veth pair");
    let state = mnt.join("state");
    let filler = mnt.join("filler");
    let (st, dev, fill) = (state.clone(), pair.dev_a.clone(), filler.clone());
    // The actuator acts in its caller's namespace: both cycles run on one thread inside
    // the sender's, with the same actuator, as a daemon's consecutive cycles would.
    let outcomes = VethPair::in_netns(&pair.ns_a, move || {
        let mut act = Actuator::new(Path::new("/"), &st);
        let mut plan = Plan::default();
        plan.push(
            placer_core::policies::PolicyKind::EnergyQos,
            Action::LimitBandwidth {
                app: "ftp".into(),
                dev: dev.clone(),
                rate_bytes_per_s: 1_000_000,
                flows: vec![FlowMatch {
                    local: "10.201.0.1:1000".parse().unwrap(),
                    remote: "10.201.0.2:21".parse().unwrap(),
                }],
                direction: Direction::Both,
            },
            "test",
        );
        // Fill the filesystem before the first journal write.
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&fill).expect("filler");
            let block = [0u8; 4096];
            while f.write_all(&block).is_ok() {}
        }
        let full = act.apply(&plan, false).remove(0).outcome;
        let q_full = show_qdiscs(&TcCtx::default(), &dev).expect("qdiscs");
        std::fs::remove_file(&fill).expect("free");
        let freed = act.apply(&plan, false).remove(0).outcome;
        let q_freed = show_qdiscs(&TcCtx::default(), &dev).expect("qdiscs");
        let restored = act.restore_all().expect("restore");
        (full, q_full, freed, q_freed, restored.len())
    })
    .join()
    .expect("thread")
    .expect("netns");
    let (full, q_full, freed, q_freed, restored) = outcomes;
    assert!(
        matches!(&full, Outcome::Transient(why) if why.contains("journal")),
        "a full disk: {full:?}"
    );
    assert!(
        root_is_default(&q_full) && !has_ingress(&q_full),
        "installed without a journal entry: {q_full:?}"
    );
    assert_eq!(freed, Outcome::Done, "once space is freed");
    assert!(
        !root_is_default(&q_freed),
        "not installed after space was freed: {q_freed:?}"
    );
    assert_eq!(restored, 1, "the journal holds the limiter's entry");
    let q = show_qdiscs(&TcCtx::netns(&pair.ns_a), &pair.dev_a).expect("qdiscs");
    assert!(root_is_default(&q) && !has_ingress(&q), "restored: {q:?}");
}
