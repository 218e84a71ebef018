//! Elections through the core's entry points, as the shell calls them: a campaign proclaims its
//! value when granted (at once, or handed over from the queue), a proclaim or a resignation
//! acts only for the term that leads, and every write carries the leader for replicas.

use leasehold_core::election::{Leadership, Seen, observe};
use leasehold_core::fence::Counter;
use leasehold_core::lock::{Lock, Mode};
use leasehold_core::machine::{self, Request, Scope};
use leasehold_core::outcome::{Answer, Event, Outcome, Party, Reply, Step};
use leasehold_core::queue::{Waiter, Waiters};

const NOW: u64 = 1_795_000_000_000;

/// One election and what the core keeps for it.
struct Election {
    lock: Option<Lock>,
    waiters: Waiters<u32>,
    counter: Counter,
}

impl Election {
    fn new() -> Self {
        Self {
            lock: None,
            waiters: Waiters::new(),
            counter: Counter::new(),
        }
    }

    fn run(&mut self, event: impl FnOnce(Scope<'_, u32>)) -> Outcome<u32> {
        let mut out = Outcome::new();
        event(Scope {
            lock: &mut self.lock,
            waiters: &mut self.waiters,
            counter: &mut self.counter,
            db: 0,
            key: b"leader",
            now_ms: NOW,
            out: &mut out,
        });
        out
    }

    fn campaign(&mut self, candidate: &str, value: &str) -> Outcome<u32> {
        let request = Request {
            owner: candidate.as_bytes(),
            mode: Mode::Exclusive,
            reentrant: false,
            deadline_ms: 2_000_000_000_000,
            tie: None,
            value: Some(value.as_bytes()),
        };
        self.run(|scope| scope.acquire(&request))
    }

    /// The leader's owner, epoch and value.
    fn leader(&self) -> Option<(String, u64, String)> {
        let leader = self.lock.as_ref()?.leader()?;
        let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).expect("utf-8");
        Some((
            text(&leader.owner),
            leader.token,
            text(leader.owner.value()),
        ))
    }
}

fn epoch_of(out: &Outcome<u32>) -> u64 {
    match out.reply {
        Reply::Token(epoch) => epoch,
        ref other => panic!("not granted: {other:?}"),
    }
}

#[test]
fn a_campaign_leads_with_its_value_and_again_keeps_its_epoch() {
    let mut election = Election::new();
    let epoch = epoch_of(&election.campaign("alice", "10.0.0.1"));
    assert_eq!(
        election.leader(),
        Some(("alice".into(), epoch, "10.0.0.1".into()))
    );
    assert_eq!(election.campaign("bob", "10.0.0.2").reply, Reply::Busy);
    assert_eq!(epoch_of(&election.campaign("alice", "10.0.0.9")), epoch);
    assert_eq!(
        election.leader(),
        Some(("alice".into(), epoch, "10.0.0.9".into()))
    );
}

#[test]
fn a_resignation_hands_over_to_the_waiting_candidate_with_its_value() {
    let mut election = Election::new();
    let first = epoch_of(&election.campaign("alice", "a"));
    assert_eq!(election.campaign("bob", "b").reply, Reply::Busy);
    let waiter = Waiter {
        handle: 7,
        owner: b"bob"[..].into(),
        ttl_ms: 30_000,
        mode: Mode::Exclusive,
        reentrant: false,
        ties: Default::default(),
        set: false,
        value: Some(b"b"[..].into()),
    };
    machine::wait(
        election.lock.as_ref(),
        &mut election.waiters,
        0,
        b"leader",
        waiter,
    );

    assert_eq!(
        election.run(|scope| scope.resign(first + 1)).reply,
        Reply::Integer(0)
    );
    assert_eq!(
        election.leader().map(|leader| leader.1),
        Some(first),
        "a stale epoch"
    );
    let out = election.run(|scope| scope.resign(first));
    assert_eq!(out.reply, Reply::Integer(1));
    let (owner, second, value) = election.leader().expect("bob leads");
    assert_eq!((owner.as_str(), value.as_str()), ("bob", "b"));
    assert!(second > first);
    assert!(
        out.steps.contains(&Step::Free),
        "the term ended before the next"
    );
    assert!(
        out.steps
            .contains(&Step::Answer(7, Answer::Granted(second)))
    );
    let hold = out.steps.iter().position(
        |step| matches!(step, Step::Hold { owner: Party::Owner(owner), .. } if &**owner == b"bob"),
    );
    let free = out.steps.iter().position(|step| *step == Step::Free);
    assert!(free < hold, "{:?}", out.steps);
}

#[test]
fn only_the_leading_term_proclaims() {
    let mut election = Election::new();
    let epoch = epoch_of(&election.campaign("alice", "a"));
    let stale = election.run(|scope| scope.proclaim(epoch - 1, b"x"));
    assert_eq!((stale.reply, stale.steps.len()), (Reply::Integer(0), 0));
    let out = election.run(|scope| scope.proclaim(epoch, b"a2"));
    assert_eq!(out.reply, Reply::Integer(1));
    assert!(matches!(
        out.steps.first(),
        Some(Step::Hold { owner: Party::Owner(owner), token, .. }) if &**owner == b"alice" && *token == epoch
    ));
    assert!(out.steps.contains(&Step::Notify(Event::Proclaim)));
    assert_eq!(
        election.leader(),
        Some(("alice".into(), epoch, "a2".into()))
    );

    let seen = Seen::Leader { epoch, value: b"a" };
    let now = Leadership::of(election.lock.as_ref());
    assert_eq!(
        observe(Some(seen), now),
        Some(now),
        "an observer is told the new value"
    );
    let empty = election.run(|scope| scope.proclaim(epoch, b""));
    assert_eq!(empty.reply, Reply::Integer(1));
    assert_eq!(
        election.leader(),
        Some(("alice".into(), epoch, String::new()))
    );
}
