use super::*;

const A: &str = "10.0.0.1:6379";
const B: &str = "10.0.0.2:6379";

fn look(checks: &mut Checks, now_ms: u64, writes: u64, online: &[&str]) -> Vec<String> {
    checks.observe(now_ms, writes, online.iter().copied())
}

const UNPROVEN: Module = Module::Unproven { silent: false };
const SILENT: Module = Module::Unproven { silent: true };

#[test]
fn a_replica_counts_once_it_said_it_runs_the_module() {
    let mut checks = Checks::default();
    look(&mut checks, 1_000, 0, &[A, B]);
    assert_eq!(checks.module(A, 1_000), UNPROVEN, "not before it said so");
    assert_eq!(checks.said(A, 1_300, 0), None);
    assert_eq!(checks.module(A, 1_300), Module::Runs);
    assert_eq!(checks.module(B, 1_300), UNPROVEN);
    assert_eq!(
        checks.unproven(1_300),
        vec![(B.to_owned(), false)],
        "B owes a word"
    );
}

#[test]
fn a_replica_silent_past_the_grace_is_reported_once() {
    let mut checks = Checks::default();
    look(&mut checks, 1_000, 0, &[A]);
    assert!(look(&mut checks, 1_000 + GRACE_MS, 0, &[A]).is_empty());
    assert_eq!(look(&mut checks, 1_001 + GRACE_MS, 0, &[A]), vec![A]);
    assert_eq!(checks.module(A, 1_001 + GRACE_MS), SILENT);
    assert!(
        look(&mut checks, 9_000, 0, &[A]).is_empty(),
        "reported once"
    );
    assert_eq!(checks.unproven(9_000), vec![(A.to_owned(), true)]);
}

#[test]
fn a_replica_that_speaks_after_lock_writes_it_was_silent_through_waits_for_them() {
    let mut checks = Checks::default();
    look(&mut checks, 1_000, 7, &[A, B]);
    look(&mut checks, 5_000, 7, &[A, B]);
    assert_eq!(
        checks.said(A, 5_000, 7),
        Some(Found::RunsNow),
        "no write missed"
    );
    assert_eq!(checks.module(A, 5_000), Module::Runs);
    assert_eq!(checks.said(B, 5_000, 8), Some(Found::Replay));
    assert_eq!(checks.module(B, 5_000), Module::Replaying);
    assert_eq!(checks.replaying(), vec![B]);
    checks.replayed();
    assert_eq!(checks.module(B, 5_000), Module::Runs);
}

#[test]
fn a_replica_coming_online_makes_every_replica_prove_the_new_challenge() {
    let mut checks = Checks::default();
    look(&mut checks, 1_000, 0, &[A]);
    checks.said(A, 1_100, 0);
    checks.replica_online(2_000, 3);
    look(&mut checks, 2_000, 3, &[A, B]);
    assert_eq!(checks.module(A, 2_000), UNPROVEN, "A may have come back");
    assert_eq!(checks.said(A, 2_100, 3), None);
    assert_eq!(checks.module(A, 2_100), Module::Runs);
    // Back without the module: it stays silent, then misses writes.
    checks.replica_online(3_000, 3);
    look(&mut checks, 3_000 + GRACE_MS + 1, 4, &[A]);
    assert_eq!(checks.module(A, 3_000 + GRACE_MS + 1), SILENT);
    assert_eq!(
        checks.said(A, 9_000, 5),
        Some(Found::Replay),
        "it missed the writes made while it was silent"
    );
}

#[test]
fn a_word_before_the_master_saw_the_replica_online_counts() {
    let mut checks = Checks::default();
    assert_eq!(checks.said(A, 1_000, 0), None);
    look(&mut checks, 1_100, 0, &[A]);
    assert_eq!(checks.module(A, 1_100), Module::Runs);
}

#[test]
fn silent_replicas_are_remembered_once_offline_with_a_fresh_grace_when_back() {
    let mut checks = Checks::default();
    look(&mut checks, 1_000, 0, &[A, B]);
    checks.said(B, 1_000, 0);
    look(&mut checks, 4_000, 0, &[A, B]);
    look(&mut checks, 5_000, 0, &[]);
    assert!(checks.unproven(5_000).is_empty(), "offline: not listed");
    look(&mut checks, 6_000, 2, &[A, B]);
    assert_eq!(
        checks.unproven(6_000),
        vec![(A.to_owned(), false), (B.to_owned(), false)],
        "B was forgotten and is new; A owes a word again from now"
    );
    assert_eq!(
        checks.said(A, 6_100, 2),
        Some(Found::Replay),
        "A was silent while 2 writes were made"
    );
    assert_eq!(checks.said(B, 6_100, 2), None, "B is new");
}

#[test]
fn an_unknown_replica_is_unproven() {
    assert_eq!(Checks::default().module(A, 0), UNPROVEN);
}

#[test]
fn a_replicas_word_reads_what_the_master_answered() {
    let never = || -> Option<String> { panic!("not asked") };
    assert_eq!(replied(None, never), Replied::Accepted);
    assert_eq!(
        replied(Some("ERR LOCK.REPLCONF challenge is not ...".into()), never),
        Replied::Refused("ERR LOCK.REPLCONF challenge is not ...".into())
    );
    let unknown =
        || Some("ERR unknown command 'LOCK.PROMOTABLE', with args beginning with: ".into());
    assert_eq!(
        replied(Some("ERR unknown command 'LOCK.REPLCONF'".into()), unknown),
        Replied::WithoutModule
    );
    let older = || Some("ERR wrong number of arguments for 'lock.promotable' command".into());
    assert!(matches!(
        replied(Some("ERR unknown command 'LOCK.REPLCONF'".into()), older),
        Replied::Refused(_)
    ));
    assert_eq!(
        replied(Some("Connection refused (os error 111)".into()), never),
        Replied::Failed("Connection refused (os error 111)".into())
    );
    assert!(matches!(
        replied(Some("NOAUTH Authentication required.".into()), never),
        Replied::Failed(_)
    ));
}

#[test]
fn a_silent_replica_is_held_back_once_offline_while_it_may_still_be_promoted() {
    let mut checks = Checks::default();
    look(&mut checks, 1_000, 0, &[A, B]);
    checks.said(B, 1_000, 0);
    look(&mut checks, 4_000, 0, &[A, B]);
    look(&mut checks, 5_000, 0, &[B]);
    assert_eq!(checks.held_back(5_000, 60_000), vec![A]);
    assert_eq!(checks.held_back(64_999, 60_000), vec![A]);
    assert!(checks.held_back(65_000, 60_000).is_empty(), "past the hold");
    look(&mut checks, 6_000, 0, &[A, B]);
    assert!(
        checks.held_back(6_000, 60_000).is_empty(),
        "back: online, unproven"
    );
    look(&mut checks, 7_000, 0, &[]);
    assert_eq!(
        checks.held_back(7_000, 60_000),
        vec![A],
        "B said it runs the module: never held back"
    );
}
