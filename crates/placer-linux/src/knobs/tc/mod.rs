//! Per-app bandwidth limiter (seed 000's network manager): rate-limit each network app's
//! flows with tc, which bounds the softirq load the app causes.
//!
//! - Egress: a root HTB qdisc (handle `1ace:`, `default 0` so unmatched traffic bypasses
//!   shaping), one class `1ace:N` per app (rate = ceil = the app's limit), and u32 filters
//!   matching each of the app's flows (src ip+port, dst ip+port) to that class.
//! - Ingress: an `ingress` qdisc whose u32 filters redirect the app's incoming flows
//!   (`action mirred egress redirect`) to an IFB device placer creates (`plqIFINDEX`),
//!   which carries the same HTB classes. IFB rather than `police` because shaping queues
//!   instead of dropping: TCP settles at the rate instead of see-sawing below it, the same
//!   class code serves both directions, and many kernels (this VM's among them) build
//!   without `act_police` while `act_mirred` is common.
//! - Every command is an argument vector run by [`std::process::Command`] (never a
//!   shell); with a network namespace it is prefixed by `ip netns exec NS`.
//! - What placer created on a device is recorded in [`DevLimits`] (journaled before each
//!   change: previous root qdisc, whether placer created the root/ingress qdiscs and the
//!   IFB). [`restore_dev`] removes exactly that: the root qdisc only if placer created it
//!   (the kernel's default comes back), otherwise only placer's classes and filters; same
//!   for ingress. A root qdisc someone else configured is never replaced.

//!
//! Layout: `ctx` (where tc runs, qdisc listings, the records), `args` (the argument
//! vectors, pure), `limiter` (the limiter), `handler` (the actuator's knob handler).

mod args;
mod ctx;
mod handler;
mod limiter;

pub use args::*;
pub use ctx::*;
pub use handler::*;
pub use limiter::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::LinuxError;
    use crate::journal::Knob;
    use crate::knob::Restored;
    use crate::testnet::*;
    use placer_core::plan::{Action, Direction, FlowMatch, Outcome};
    use std::net::SocketAddr;
    use std::path::Path;

    fn fm(l: &str, r: &str) -> FlowMatch {
        FlowMatch {
            local: l.parse().unwrap(),
            remote: r.parse().unwrap(),
        }
    }

    #[test]
    fn argument_vectors() {
        let f = fm("10.0.0.2:40000", "10.0.0.1:21");
        assert_eq!(
            class_filter_args("eth0", 3, &f.local, &f.remote).join(" "),
            "filter add dev eth0 parent 1ace: protocol ip prio 1003 u32 match ip src \
             10.0.0.2/32 match ip dst 10.0.0.1/32 match ip sport 40000 0xffff match ip dport \
             21 0xffff flowid 1ace:3"
        );
        assert_eq!(
            redirect_filter_args("eth0", "plq2", 3, &f).join(" "),
            "filter add dev eth0 parent ffff: protocol ip prio 1003 u32 match ip src \
             10.0.0.1/32 match ip dst 10.0.0.2/32 match ip sport 21 0xffff match ip dport \
             40000 0xffff action mirred egress redirect dev plq2"
        );
        let f6 = fm("[::]:8080", "[2001:db8::1]:0");
        assert_eq!(
            class_filter_args("eth0", 12, &f6.local, &f6.remote).join(" "),
            "filter add dev eth0 parent 1ace: protocol ipv6 prio 2012 u32 match ip6 dst \
             2001:db8::1/128 match ip6 sport 8080 0xffff flowid 1ace:c"
        );
        assert_eq!(
            class_args("eth0", 1, 2_000_000).join(" "),
            "class replace dev eth0 parent 1ace: classid 1ace:1 htb rate 2000000bps ceil \
             2000000bps quantum 60000"
        );
        let ns = TcCtx::netns("n1");
        assert_eq!(
            ns.argv("tc", &s(&["qdisc", "show"])),
            s(&["ip", "netns", "exec", "n1", "tc", "qdisc", "show"])
        );
        assert_eq!(TcCtx::host().argv("tc", &[]), s(&["tc"]));
        let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
        assert_eq!(u32_match(&any, &any), s(&["match", "u32", "0", "0"]));
    }

    #[test]
    fn parses_qdisc_json() {
        let q = parse_qdiscs(
            r#"[{"kind":"noqueue","handle":"0:","root":true,"refcnt":2,"options":{}},
                {"kind":"ingress","handle":"ffff:","parent":"ffff:fff1","options":{}}]"#,
        )
        .unwrap();
        assert!(root_is_default(&q) && has_ingress(&q) && !root_is_placers(&q));
        let q = parse_qdiscs(r#"[{"kind":"htb","handle":"1ace:","root":true}]"#).unwrap();
        assert!(root_is_placers(&q) && !root_is_default(&q) && !has_ingress(&q));
        let q = parse_qdiscs(r#"[{"kind":"htb","handle":"1:","root":true}]"#).unwrap();
        assert!(!root_is_placers(&q) && !root_is_default(&q));
        assert!(parse_qdiscs("").unwrap().is_empty());
        assert!(parse_qdiscs("not json").is_err());
    }

    /// Only the kernel's default root qdisc and no ingress qdisc, on every device of `ns`.
    fn clean(ns: &str, dev: &str) -> bool {
        let q = show_qdiscs(&TcCtx::netns(ns), dev).unwrap();
        root_is_default(&q) && !has_ingress(&q)
    }

    fn links(ns: &str) -> String {
        TcCtx::netns(ns)
            .run("ip", &s(&["-o", "link", "show"]))
            .unwrap_or_default()
    }

    fn within(rate: f64, limit: f64, tol: f64) -> bool {
        (rate - limit).abs() <= tol * limit
    }

    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_egress_and_ingress_limits_cap_the_rate_and_restore_cleanly() {
        placer_testkit::require_root();
        if let Some(why) = unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        let pair = VethPair::new().expect("veth pair");
        let limit = 2_000_000u64; // 16 Mbit/s
                                  // Unlimited first: the test can fail (the link is far faster than the limit).
        let free = stream(&pair, 5201, 0.3, 1.0, |_, _| {}).unwrap();
        assert!(free > 4.0 * limit as f64, "unlimited rate {free:.0} B/s");

        // Egress: limiter on the sender's veth, in the sender's namespace.
        let ctx_a = TcCtx::netns(&pair.ns_a);
        let mut lim = Limiter::new();
        let mut journaled = Vec::new();
        let dev_a = pair.dev_a.clone();
        let rate = {
            let lim = &mut lim;
            let journaled = &mut journaled;
            stream(&pair, 5202, 0.8, 2.5, |local, remote| {
                let flows = [FlowMatch { local, remote }];
                let ch = lim
                    .limit(
                        &ctx_a,
                        &dev_a,
                        &LimitSpec {
                            app: "sender",
                            rate_bytes_per_s: limit,
                            flows: &flows,
                            direction: Direction::Egress,
                        },
                        &mut |r| {
                            journaled.push(r.clone());
                            Ok(())
                        },
                    )
                    .unwrap();
                assert_eq!(ch, LimitChange::Applied);
            })
            .unwrap()
        };
        eprintln!("unlimited {free:.0} B/s; egress limit {limit} B/s -> {rate:.0} B/s");
        assert!(
            within(rate, limit as f64, 0.10),
            "egress-limited rate {rate:.0} B/s"
        );
        assert!(journaled
            .first()
            .is_some_and(|r| r.root_created && r.prev_root == "noqueue 0:"));
        assert!(!clean(&pair.ns_a, &pair.dev_a));
        lim.restore_all().unwrap();
        assert!(clean(&pair.ns_a, &pair.dev_a));

        // Ingress: limiter on the receiver's veth through an IFB device.
        let ctx_b = TcCtx::netns(&pair.ns_b);
        let dev_b = pair.dev_b.clone();
        let mut lim = Limiter::new();
        let rate = {
            let lim = &mut lim;
            stream(&pair, 5203, 0.8, 2.5, |local, remote| {
                // The receiver's view: local = its address, remote = the sender.
                let flows = [FlowMatch {
                    local: remote,
                    remote: local,
                }];
                lim.limit(
                    &ctx_b,
                    &dev_b,
                    &LimitSpec {
                        app: "receiver",
                        rate_bytes_per_s: limit,
                        flows: &flows,
                        direction: Direction::Ingress,
                    },
                    &mut |_| Ok(()),
                )
                .unwrap();
            })
            .unwrap()
        };
        eprintln!("ingress limit {limit} B/s -> {rate:.0} B/s");
        assert!(
            within(rate, limit as f64, 0.10),
            "ingress-limited rate {rate:.0} B/s"
        );
        let rec = lim.record(&ctx_b, &pair.dev_b).unwrap().clone();
        let ifb = rec.ifb.clone().unwrap();
        assert!(links(&pair.ns_b).contains(&ifb));
        assert!(rec.ingress_created && !rec.root_created);
        // Removing the last app restores the device: no qdiscs, no IFB.
        assert_eq!(lim.remove(&ctx_b, &pair.dev_b, "receiver").unwrap(), None);
        assert!(clean(&pair.ns_b, &pair.dev_b));
        assert!(!links(&pair.ns_b).contains(&ifb));
        // Restore is idempotent.
        restore_dev(&rec).unwrap();
    }

    /// Issue 17: placer run inside a named namespace (`ip netns exec NAME placer ...`)
    /// journals the namespace, so a restore from the host removes the qdisc where it is,
    /// instead of reporting it restored and dropping it.
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_qdisc_set_inside_a_namespace_is_restored_there() {
        placer_testkit::require_root();
        if let Some(why) = unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        let pair = VethPair::new().expect("veth pair");
        let dev = pair.dev_a.clone();
        let ns = pair.ns_a.clone();
        // As the daemon would, from inside the namespace: its context names it.
        let rec = VethPair::in_netns(&ns, move || {
            let ctx = TcCtx::current();
            let flows = [fm("10.201.0.1:1000", "10.201.0.2:2000")];
            let mut lim = Limiter::new();
            let mut journaled = None;
            let spec = LimitSpec {
                app: "app",
                rate_bytes_per_s: 1_000_000,
                flows: &flows,
                direction: Direction::Egress,
            };
            lim.limit(&ctx, &dev, &spec, &mut |r| {
                journaled = Some(r.clone());
                Ok(())
            })
            .expect("limit");
            journaled.expect("journaled")
        })
        .join()
        .expect("thread")
        .expect("setns");
        assert_eq!(rec.ctx.netns.as_deref(), Some(ns.as_str()), "{rec:?}");
        assert_eq!(
            knob_of(&rec),
            Knob::TcQdisc {
                dev: pair.dev_a.clone(),
                netns: Some(ns.clone())
            }
        );
        // From the host namespace (this thread): removed in the namespace.
        restore_dev(&rec).expect("restore");
        let q = show_qdiscs(&TcCtx::netns(&ns), &pair.dev_a).expect("qdiscs");
        assert!(root_is_default(&q), "left behind: {q:?}");
    }

    /// Issue 17: when the journal cannot be written (a full state dir), tc changes nothing:
    /// a qdisc the journal does not cover could never be restored after a crash.
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_failed_journal_changes_no_qdisc() {
        placer_testkit::require_root();
        if let Some(why) = unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        let pair = VethPair::new().expect("veth pair");
        let ctx = TcCtx::netns(&pair.ns_a);
        let flows = [fm("10.201.0.1:1000", "10.201.0.2:2000")];
        for direction in [Direction::Egress, Direction::Ingress, Direction::Both] {
            let mut lim = Limiter::new();
            let spec = LimitSpec {
                app: "app",
                rate_bytes_per_s: 1_000_000,
                flows: &flows,
                direction,
            };
            let r = lim.limit(&ctx, &pair.dev_a, &spec, &mut |_| {
                Err(LinuxError::Other("No space left on device".into()))
            });
            assert!(r.is_err(), "{direction:?}: limited without a journal");
            let q = show_qdiscs(&ctx, &pair.dev_a).expect("qdiscs");
            assert!(
                root_is_default(&q) && !has_ingress(&q),
                "{direction:?}: {q:?}"
            );
            assert!(
                !links(&pair.ns_a).contains("plq"),
                "{direction:?}: an IFB was created"
            );
        }
    }

    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_foreign_root_qdisc_is_not_replaced_and_same_limit_is_unchanged() {
        placer_testkit::require_root();
        if let Some(why) = unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        let pair = VethPair::new().expect("veth pair");
        let ctx = TcCtx::netns(&pair.ns_a);
        let flows = [fm("10.201.0.1:1000", "10.201.0.2:2000")];
        let mut lim = Limiter::new();
        let put = |lim: &mut Limiter, app: &str, rate: u64, direction: Direction| {
            let spec = LimitSpec {
                app,
                rate_bytes_per_s: rate,
                flows: &flows,
                direction,
            };
            lim.limit(&ctx, &pair.dev_a, &spec, &mut |_| Ok(()))
        };
        assert_eq!(
            put(&mut lim, "x", 1000, Direction::Both).unwrap(),
            LimitChange::Applied
        );
        assert_eq!(
            put(&mut lim, "x", 1000, Direction::Both).unwrap(),
            LimitChange::Unchanged
        );
        // A second app on the same device gets its own class; removing one keeps the other.
        put(&mut lim, "y", 5000, Direction::Egress).unwrap();
        let rec = lim.remove(&ctx, &pair.dev_a, "x").unwrap().unwrap();
        assert_eq!(rec.apps.len(), 1);
        let classes = ctx
            .run("tc", &s(&["class", "show", "dev", &pair.dev_a]))
            .unwrap();
        assert!(
            classes.contains("1ace:2") && !classes.contains("1ace:1 "),
            "{classes}"
        );
        lim.restore_all().unwrap();
        assert!(clean(&pair.ns_a, &pair.dev_a));
        // Someone else's root qdisc: refused, left alone.
        ctx.run(
            "tc",
            &s(&[
                "qdisc",
                "add",
                "dev",
                &pair.dev_a,
                "root",
                "handle",
                "1:",
                "htb",
            ]),
        )
        .unwrap();
        let e = put(&mut lim, "x", 1000, Direction::Egress)
            .unwrap_err()
            .to_string();
        assert!(e.contains("someone else"), "{e}");
        let q = show_qdiscs(&ctx, &pair.dev_a).unwrap();
        assert!(q.iter().any(|q| q.root && q.handle == "1:"));
    }

    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_handler_journals_and_restore_all_cleans_up() {
        placer_testkit::require_root();
        if let Some(why) = unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        use crate::actuator::Actuator;
        use placer_core::plan::Plan;
        let pair = VethPair::new().expect("veth pair");
        let state = std::env::temp_dir().join(format!("placer-tc-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        // The built-in handler acts in the caller's namespace: run the actuator on a
        // thread inside the sender's namespace (tc children inherit it).
        let (st, dev) = (state.clone(), pair.dev_a.clone());
        let applied = VethPair::in_netns(&pair.ns_a, move || {
            let mut act = Actuator::new(Path::new("/"), &st);
            let mut plan = Plan::default();
            plan.push(
                placer_core::policy_kind::PolicyKind::EnergyQos,
                Action::LimitBandwidth {
                    app: "ftp".into(),
                    dev: dev.clone(),
                    rate_bytes_per_s: 1_000_000,
                    flows: vec![fm("10.201.0.1:1000", "10.201.0.2:21")],
                    direction: Direction::Both,
                },
                "test",
            );
            act.apply(&plan, false).remove(0).outcome
        })
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(applied, Outcome::Done);
        assert!(!clean(&pair.ns_a, &pair.dev_a));
        let j = crate::journal::Journal::load(&state).unwrap();
        // The actuator ran inside the namespace: the journal names it (issue 17; it used to
        // record none, and a restore from the host then missed the qdisc).
        let e = j
            .get(&Knob::TcQdisc {
                dev: pair.dev_a.clone(),
                netns: Some(pair.ns_a.clone()),
            })
            .unwrap();
        assert_eq!(e.previous, "noqueue 0:");
        // A fresh actuator (as `placer restore` after a daemon crash) restores from the
        // journal alone.
        let st = state.clone();
        let restored = VethPair::in_netns(&pair.ns_a, move || {
            Actuator::new(Path::new("/"), &st)
                .restore_all()
                .unwrap()
                .into_iter()
                .map(|(_, r)| r)
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(restored, vec![Restored::Restored]);
        assert!(clean(&pair.ns_a, &pair.dev_a));
        assert!(!links(&pair.ns_a).contains("plq"));
        let _ = std::fs::remove_dir_all(&state);
    }
}
