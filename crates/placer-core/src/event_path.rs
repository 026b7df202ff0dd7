//! Which path an observation takes, chosen by what each costs: the kernel's per-event hook
//! (an eBPF program run at every context switch of every CPU, or at every TCP segment
//! received) or a per-sample read (every `/proc/PID/stat`, a full socket dump) that gives
//! the same observation (the sampler's equivalence tests hold the two equal).
//!
//! The hook's cost follows how busy the machine is (events per second x ns per event, in
//! the kernel, beside whichever task switched); the read's follows what is sampled
//! (processes or sockets x ns each, per sample, in placer's own thread). On a quiet
//! machine the hook is far cheaper; under a storm of switches it is the dearer one. A
//! [`PathChooser`] is fed both costs once per sample ([`Costs`], measured by the caller)
//! and says when to move from one path to the other.
//!
//! Invariants (each tested below; a test's name starts with the ones it checks):
//! - **P1** an unknown cost (either side `None`, not finite, or negative) keeps the
//!   current path and restarts the count of P2;
//! - **P2** a move happens only after [`ChooserConfig::streak`] evaluations in a row in
//!   which the other path cost at most `1 / factor` of the current one
//!   ([`ChooserConfig::factor`] >= 1);
//! - **P3** after a move (or a [`PathChooser::reset`]), no other move for
//!   [`ChooserConfig::hold`] evaluations: within any `hold` evaluations in a row there is
//!   at most one move, whatever the costs (no flapping: each move costs a full read, and
//!   an attach a program load). The first move after [`PathChooser::new`] needs only P2;
//! - **P4** a path cheaper by less than the factor (an equal cost too) never causes a
//!   move;
//! - **P5** the other path cheaper by the factor at every evaluation is chosen within
//!   `hold + streak` evaluations (it does not wait forever);
//! - **P6** a move is to the cheaper of the two by the figures of the evaluation that
//!   makes it, and it reports those figures (the caller logs them).
//!
//! Pure: no I/O, no clock; the same inputs give the same moves.

/// The two ways of making one observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventPath {
    /// The kernel's per-event hook is attached; a sample reads what it says changed.
    Events,
    /// No hook; each sample reads everything it observes.
    Polling,
}

impl EventPath {
    fn other(self) -> EventPath {
        match self {
            EventPath::Events => EventPath::Polling,
            EventPath::Polling => EventPath::Events,
        }
    }
}

/// What each path costs now, in ns of CPU per second of wall time (1e7 = 1% of one
/// CPU); `None` = not known yet.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Costs {
    pub events_ns_per_s: Option<f64>,
    pub polling_ns_per_s: Option<f64>,
}

impl Costs {
    fn of(&self, p: EventPath) -> Option<f64> {
        match p {
            EventPath::Events => self.events_ns_per_s,
            EventPath::Polling => self.polling_ns_per_s,
        }
        .filter(|c| c.is_finite() && *c >= 0.0)
    }
}

/// The events path's cost: `events_per_s` runs of a hook at `ns_per_event` each in the
/// kernel, plus what the sampler itself spends per second on that path.
pub fn events_cost_ns_per_s(
    events_per_s: Option<f64>,
    ns_per_event: Option<f64>,
    sampler_ns_per_s: Option<f64>,
) -> Option<f64> {
    Some(events_per_s? * ns_per_event? + sampler_ns_per_s?)
}

/// The hysteresis of a [`PathChooser`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChooserConfig {
    /// How much cheaper the other path must be (P2, P4): 1.5 = at most two thirds.
    pub factor: f64,
    /// Evaluations in a row it must be so (P2).
    pub streak: u32,
    /// Evaluations after a move before the next may happen (P3).
    pub hold: u32,
}

impl Default for ChooserConfig {
    /// A move when the other path is a third cheaper for 5 samples in a row (5 s at the
    /// daemon's 1 s interval: a burst of switches shorter than that does not move it), and
    /// then none for 30 samples.
    fn default() -> ChooserConfig {
        ChooserConfig {
            factor: 1.5,
            streak: 5,
            hold: 30,
        }
    }
}

/// A move from one path to the other, with the figures that made it (P6).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Move {
    pub to: EventPath,
    pub events_ns_per_s: f64,
    pub polling_ns_per_s: f64,
}

/// The current path and the hysteresis' memory.
#[derive(Debug, Clone)]
pub struct PathChooser {
    cfg: ChooserConfig,
    path: EventPath,
    /// Evaluations in a row the other path was cheaper by the factor.
    streak: u32,
    /// Evaluations since the last move or reset (from `hold` at the start).
    since_move: u32,
}

impl PathChooser {
    pub fn new(cfg: ChooserConfig, start: EventPath) -> PathChooser {
        PathChooser {
            cfg: ChooserConfig {
                factor: cfg.factor.max(1.0),
                ..cfg
            },
            path: start,
            streak: 0,
            // The start is no move: the first needs only its streak.
            since_move: cfg.hold,
        }
    }

    pub fn path(&self) -> EventPath {
        self.path
    }

    /// The path was changed from outside (a failed attach leaves the polling path): the
    /// hysteresis starts again from it.
    pub fn reset(&mut self, path: EventPath) {
        self.path = path;
        self.streak = 0;
        self.since_move = 0;
    }

    /// One evaluation; `Some` when the caller should move to the other path now.
    pub fn evaluate(&mut self, costs: Costs) -> Option<Move> {
        self.since_move = self.since_move.saturating_add(1);
        let other = self.path.other();
        let (Some(cur), Some(alt)) = (costs.of(self.path), costs.of(other)) else {
            self.streak = 0; // P1
            return None;
        };
        // P2, P4: cheaper by the factor, strictly below the current cost (an equal cost
        // of 0 on both sides is no reason to move).
        if alt * self.cfg.factor <= cur && alt < cur {
            self.streak = self.streak.saturating_add(1);
        } else {
            self.streak = 0;
        }
        if self.streak < self.cfg.streak.max(1) || self.since_move <= self.cfg.hold {
            return None; // P2, P3
        }
        self.path = other;
        self.streak = 0;
        self.since_move = 0;
        Some(Move {
            to: other,
            events_ns_per_s: costs.of(EventPath::Events).unwrap_or(0.0),
            polling_ns_per_s: costs.of(EventPath::Polling).unwrap_or(0.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(streak: u32, hold: u32) -> ChooserConfig {
        ChooserConfig {
            factor: 1.5,
            streak,
            hold,
        }
    }

    fn c(events: f64, polling: f64) -> Costs {
        Costs {
            events_ns_per_s: Some(events),
            polling_ns_per_s: Some(polling),
        }
    }

    /// Evaluations until the first move (None within `n`).
    fn first_move(ch: &mut PathChooser, costs: Costs, n: u32) -> Option<u32> {
        (1..=n).find(|_| ch.evaluate(costs).is_some())
    }

    #[test]
    fn p1_an_unknown_cost_keeps_the_path_and_restarts_the_streak() {
        let mut ch = PathChooser::new(cfg(3, 0), EventPath::Events);
        let unknowns = [
            Costs::default(),
            Costs {
                events_ns_per_s: Some(1e9),
                polling_ns_per_s: None,
            },
            Costs {
                events_ns_per_s: None,
                polling_ns_per_s: Some(1.0),
            },
            c(f64::NAN, 1.0),
            c(1e9, f64::INFINITY),
            c(1e9, -1.0),
        ];
        for u in unknowns {
            for _ in 0..10 {
                assert_eq!(ch.evaluate(u), None, "{u:?}");
            }
        }
        // Two cheaper readings, an unknown one, two more: the streak of 3 was broken.
        let cheap = c(1e9, 1.0);
        assert_eq!(ch.evaluate(cheap), None);
        assert_eq!(ch.evaluate(cheap), None);
        assert_eq!(ch.evaluate(Costs::default()), None);
        assert_eq!(ch.evaluate(cheap), None);
        assert_eq!(ch.evaluate(cheap), None);
        assert!(ch.evaluate(cheap).is_some());
        assert_eq!(ch.path(), EventPath::Polling);
    }

    #[test]
    fn p2_a_move_needs_the_whole_streak_in_a_row() {
        let mut ch = PathChooser::new(cfg(4, 0), EventPath::Events);
        let (dear, cheap) = (c(300.0, 100.0), c(100.0, 100.0));
        for round in 0..5 {
            for _ in 0..3 {
                assert_eq!(ch.evaluate(dear), None, "round {round}");
            }
            assert_eq!(ch.evaluate(cheap), None, "round {round}");
        }
        assert_eq!(ch.path(), EventPath::Events);
        assert_eq!(first_move(&mut ch, dear, 4), Some(4));
    }

    #[test]
    fn p3_at_most_one_move_within_hold_evaluations_whatever_the_costs() {
        let hold = 7;
        let mut ch = PathChooser::new(cfg(1, hold), EventPath::Events);
        // Costs that flip at every evaluation, and random ones: each gap between two
        // moves is longer than `hold`.
        let mut rng = crate::rng::Rng::new(46);
        let mut last: Option<u32> = None;
        let mut moves = 0;
        for i in 0..2000u32 {
            let costs = if i < 1000 {
                if i % 2 == 0 {
                    c(1e6, 1.0)
                } else {
                    c(1.0, 1e6)
                }
            } else {
                c(rng.below(1000) as f64, rng.below(1000) as f64)
            };
            if ch.evaluate(costs).is_some() {
                if let Some(l) = last {
                    assert!(i - l > hold, "moves at {l} and {i}");
                }
                last = Some(i);
                moves += 1;
            }
        }
        assert!(moves > 10, "the test exercised too few moves: {moves}");
    }

    #[test]
    fn p4_cheaper_by_less_than_the_factor_never_moves() {
        for start in [EventPath::Events, EventPath::Polling] {
            let mut ch = PathChooser::new(cfg(1, 0), start);
            for (cur, alt) in [(100.0, 100.0), (149.0, 100.0), (0.0, 0.0), (1.49, 1.0)] {
                let costs = match start {
                    EventPath::Events => c(cur, alt),
                    EventPath::Polling => c(alt, cur),
                };
                assert_eq!(first_move(&mut ch, costs, 100), None, "{costs:?}");
            }
            // Exactly the factor moves.
            let costs = match start {
                EventPath::Events => c(150.0, 100.0),
                EventPath::Polling => c(100.0, 150.0),
            };
            assert!(ch.evaluate(costs).is_some(), "{start:?}");
        }
    }

    #[test]
    fn p3_the_first_move_needs_only_its_streak() {
        let mut ch = PathChooser::new(cfg(3, 30), EventPath::Events);
        assert_eq!(first_move(&mut ch, c(1e7, 1e5), 100), Some(3));
        // The next waits for the hold.
        let back = first_move(&mut ch, c(1e3, 1e5), 100).expect("back");
        assert_eq!(back, 31);
    }

    #[test]
    fn p5_a_path_cheaper_throughout_is_chosen_within_hold_plus_streak() {
        for (streak, hold) in [(1, 0), (3, 0), (5, 30), (2, 10)] {
            let mut ch = PathChooser::new(cfg(streak, hold), EventPath::Events);
            let n = first_move(&mut ch, c(1e7, 1e5), 1000).expect("a move");
            assert!(n <= hold + streak, "streak {streak}, hold {hold}: {n}");
            assert_eq!(ch.path(), EventPath::Polling);
            // And back, as soon as the hold allows.
            let back = first_move(&mut ch, c(1e3, 1e5), 1000).expect("a move back");
            assert!(back <= hold + streak, "back after {back}");
            assert_eq!(ch.path(), EventPath::Events);
        }
    }

    #[test]
    fn p6_a_move_goes_to_the_cheaper_path_and_reports_its_figures() {
        let mut ch = PathChooser::new(cfg(1, 0), EventPath::Events);
        let m = ch.evaluate(c(1.8e7, 1.2e6)).expect("a move");
        assert_eq!(
            m,
            Move {
                to: EventPath::Polling,
                events_ns_per_s: 1.8e7,
                polling_ns_per_s: 1.2e6
            }
        );
        // On the polling path, a dearer events path keeps it there.
        assert_eq!(first_move(&mut ch, c(1.8e7, 1.2e6), 100), None);
        let m = ch.evaluate(c(1e5, 1.2e6)).expect("back");
        assert_eq!(m.to, EventPath::Events);
    }

    #[test]
    fn reset_starts_the_hysteresis_again_from_the_given_path() {
        let mut ch = PathChooser::new(cfg(2, 3), EventPath::Events);
        ch.reset(EventPath::Polling);
        assert_eq!(ch.path(), EventPath::Polling);
        // The hold counts from the reset.
        let n = first_move(&mut ch, c(1.0, 1e6), 100).expect("a move");
        assert_eq!(n, 4);
    }

    #[test]
    fn events_cost_is_rate_times_ns_plus_the_sampler_and_unknown_when_any_is() {
        assert_eq!(
            events_cost_ns_per_s(Some(100_000.0), Some(200.0), Some(1e6)),
            Some(2.1e7)
        );
        assert_eq!(events_cost_ns_per_s(None, Some(200.0), Some(1.0)), None);
        assert_eq!(events_cost_ns_per_s(Some(1.0), None, Some(1.0)), None);
        assert_eq!(events_cost_ns_per_s(Some(1.0), Some(1.0), None), None);
    }
}
