use super::*;

const A: &str = "10.0.0.1:6379";
const B: &str = "10.0.0.2:6379";

fn look(checks: &mut Checks, now_ms: u64, online: &[&str]) -> Vec<String> {
    let mut asked = checks.observe(now_ms, online.iter().copied());
    asked.sort();
    asked
}

#[test]
fn a_replica_counts_once_found_running_the_module() {
    let mut checks = Checks::default();
    assert_eq!(look(&mut checks, 1_000, &[A, B]), vec![A, B]);
    assert!(!checks.runs(A), "not before it answered");
    assert_eq!(
        look(&mut checks, 1_200, &[A, B]),
        Vec::<String>::new(),
        "asked once a second"
    );
    assert_eq!(checks.answer(A, Answer::Runs, 0), None);
    assert!(checks.runs(A));
    assert_eq!(
        look(&mut checks, 5_000, &[A, B]),
        vec![B],
        "a replica that runs it is not asked again"
    );
    assert_eq!(checks.unverified().collect::<Vec<_>>(), vec![B]);
}

#[test]
fn a_replica_without_the_module_is_reported_once_and_asked_every_second() {
    let mut checks = Checks::default();
    look(&mut checks, 1_000, &[A]);
    assert_eq!(checks.answer(A, Answer::Lacks, 7), Some(Found::Lacks));
    assert!(!checks.runs(A));
    assert_eq!(checks.lacking().collect::<Vec<_>>(), vec![A]);
    assert_eq!(look(&mut checks, 1_500, &[A]), Vec::<String>::new());
    assert_eq!(look(&mut checks, 2_000, &[A]), vec![A]);
    assert_eq!(checks.answer(A, Answer::Lacks, 9), None, "said once");
    assert_eq!(
        checks.answer(A, Answer::Unknown("timeout".into()), 9),
        None,
        "still lacking"
    );
    assert_eq!(checks.lacking().collect::<Vec<_>>(), vec![A]);
}

#[test]
fn a_replica_that_loads_the_module_after_lock_writes_waits_for_them_to_be_sent_again() {
    let mut checks = Checks::default();
    look(&mut checks, 1_000, &[A, B]);
    checks.answer(A, Answer::Lacks, 7);
    checks.answer(B, Answer::Lacks, 7);
    look(&mut checks, 2_000, &[A, B]);
    assert_eq!(
        checks.answer(A, Answer::Runs, 7),
        Some(Found::RunsNow),
        "no write missed"
    );
    assert!(checks.runs(A));
    assert_eq!(checks.answer(B, Answer::Runs, 8), Some(Found::Replay));
    assert!(!checks.runs(B));
    assert_eq!(checks.unverified().collect::<Vec<_>>(), vec![B]);
    checks.replayed();
    assert!(checks.runs(B));
}

#[test]
fn every_replica_is_asked_again_after_any_comes_online() {
    let mut checks = Checks::default();
    look(&mut checks, 1_000, &[A, B]);
    checks.answer(A, Answer::Runs, 0);
    checks.answer(B, Answer::Runs, 0);
    checks.replica_online();
    assert!(
        !checks.runs(A) && !checks.runs(B),
        "neither counts until asked again"
    );
    assert_eq!(look(&mut checks, 1_100, &[A, B]), vec![A, B], "at once");
    assert_eq!(checks.answer(A, Answer::Runs, 3), None);
    assert!(checks.runs(A));
    assert_eq!(
        checks.answer(B, Answer::Unknown("connection refused".into()), 3),
        Some(Found::Unreachable("connection refused".into()))
    );
    assert!(!checks.runs(B));
    assert_eq!(
        checks.answer(B, Answer::Runs, 5),
        Some(Found::Replay),
        "it may have missed writes"
    );
}

#[test]
fn a_replica_gone_offline_is_forgotten_unless_it_may_have_missed_writes() {
    let mut checks = Checks::default();
    look(&mut checks, 1_000, &[A, B]);
    checks.answer(A, Answer::Runs, 0);
    checks.answer(B, Answer::Lacks, 0);
    look(&mut checks, 1_200, &[]);
    assert_eq!(
        look(&mut checks, 1_400, &[A, B]),
        vec![A],
        "A is new again; B was asked at 1 000"
    );
    assert!(!checks.runs(A));
    assert_eq!(look(&mut checks, 2_000, &[A, B]), vec![B]);
    assert_eq!(
        checks.answer(B, Answer::Runs, 4),
        Some(Found::Replay),
        "B came back with the module"
    );
}

#[test]
fn at_most_so_many_offline_replicas_are_remembered() {
    let mut checks = Checks::default();
    let ids: Vec<String> = (0..REMEMBERED + 10)
        .map(|n| format!("10.0.1.{n}:6379"))
        .collect();
    look(
        &mut checks,
        1_000,
        &ids.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    for id in &ids {
        checks.answer(id, Answer::Lacks, 0);
    }
    look(&mut checks, 2_000, &[]);
    assert_eq!(checks.replicas.len(), REMEMBERED);
}

#[test]
fn a_replicas_error_says_whether_it_runs_the_module() {
    assert_eq!(
        read_error("ERR unknown command 'LOCK.PROMOTABLE', with args beginning with: "),
        Answer::Lacks
    );
    assert_eq!(
        read_error("ERR wrong number of arguments for 'lock.promotable' command"),
        Answer::Runs
    );
    assert_eq!(
        read_error("DENIED Redis is running in protected mode"),
        Answer::Unknown("DENIED Redis is running in protected mode".into())
    );
}
