use super::*;

const ID: &str = "8c5e2d0e5b1f6a2f1d3c4b5a69788796a5b4c3d2";
const OTHER: &str = "1111111111111111111111111111111111111111";

/// A `LOCK.INSYNC` reply.
fn insync(offset: i64, acked: i64, (members, required): (i64, i64), replid2: &str) -> Value {
    Value::Array(vec![
        Value::Int(offset),
        Value::Int(acked),
        Value::Int(members),
        Value::Int(required),
        Value::BulkString(ID.into()),
        Value::BulkString(replid2.into()),
    ])
}

fn none() -> String {
    "0".repeat(40)
}

fn error(text: &str) -> Value {
    redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).expect("an error reply")
}

/// Each command of `pipeline`, its arguments joined by spaces.
fn commands(pipeline: &Pipeline) -> Vec<String> {
    let arg = |arg: redis::Arg<&[u8]>| match arg {
        redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        _ => "?".to_owned(),
    };
    let command = |cmd: &Cmd| cmd.args_iter().map(arg).collect::<Vec<_>>().join(" ");
    pipeline.cmd_iter().map(command).collect()
}

/// Judges `replies` to `sync`'s tail with a fresh memory, `left` of the timeout.
fn judge(sync: &Sync, replies: Vec<Value>, left: Duration) -> Result<(), Refusal> {
    let check = Check::read(sync, replies).map_err(|reason| Refusal {
        reason,
        again: None,
    })?;
    check.judge(sync, &mut Seen::default(), &[None], left)
}

const LEFT: Duration = Duration::from_millis(500);

#[test]
fn a_reply_is_read_with_its_old_master_when_it_has_one() {
    let read = InSync::read(insync(100, 90, (2, 1), OTHER)).expect("read");
    let expected = InSync {
        offset: 100,
        acked: 90,
        members: 2,
        required: 1,
        replid: ID.to_owned(),
        replaced: Some(OTHER.to_owned()),
    };
    assert_eq!(read, expected);
    let first = InSync::read(insync(1, 1, (0, 0), &none())).expect("read");
    assert_eq!(first.replaced, None, "forty 0s: none");
}

#[test]
fn an_error_or_another_shape_is_a_reason_not_to_count() {
    let replica = error("ERR LOCK.INSYNC is answered by the master; this server is a replica");
    let refused = InSync::read(replica).expect_err("a replica");
    assert!(refused.contains("this server is a replica"), "{refused}");
    let short = Value::Array(vec![Value::Int(1), Value::Int(1)]);
    assert!(InSync::read(short).is_err());
    let sync = Sync::to_replicas();
    let waited = vec![
        error("ERR WAIT cannot be used"),
        insync(9, 9, (1, 1), &none()),
    ];
    let refused = judge(
        &sync,
        [vec![insync(9, 0, (1, 1), &none())], waited].concat(),
        LEFT,
    );
    assert!(
        refused
            .expect_err("no WAIT")
            .reason
            .starts_with("WAIT failed")
    );
    let refused = judge(&sync, Vec::new(), LEFT).expect_err("no reply");
    assert_eq!(refused.reason, "a reply is missing");
}

#[test]
fn the_tail_waits_for_the_hint_and_asks_the_set_again() {
    let sync = Sync::to_replicas();
    assert_eq!(
        commands(&sync.tail(2)),
        ["LOCK.INSYNC", "WAIT 2 1000", "LOCK.INSYNC"]
    );
    assert_eq!(
        commands(&sync.tail(0)),
        ["LOCK.INSYNC"],
        "nothing to wait for"
    );
    let aof = sync.with_aof(true).timeout(Duration::from_millis(1_500));
    assert_eq!(
        commands(&aof.tail(0)),
        ["LOCK.INSYNC", "WAITAOF 1 0 1500", "LOCK.INSYNC"],
        "the master's own fsync"
    );
    let left = Duration::from_micros(300);
    assert_eq!(
        commands(&sync.again(3, left)),
        ["WAIT 3 1", "LOCK.INSYNC"],
        "at least 1 ms: 0 would wait for ever"
    );
    assert_eq!(commands(&Sync::exactly(2).tail(5)), ["WAIT 2 1000"]);
    assert!(Sync::off().tail(5).is_empty());
}

#[test]
fn a_write_counts_when_every_member_acknowledged_it_and_there_are_enough() {
    let sync = Sync::to_replicas();
    let before = insync(100, 80, (2, 1), &none());
    let counted = |after: Value| judge(&sync, vec![before.clone(), Value::Int(2), after], LEFT);
    assert_eq!(counted(insync(120, 100, (2, 1), &none())), Ok(()));
    let late = counted(insync(120, 99, (2, 1), &none())).expect_err("one short");
    assert_eq!(
        late.reason,
        "not every in-sync replica acknowledged within 1000 ms"
    );
    let few = counted(insync(120, 120, (1, 2), &none())).expect_err("too few");
    assert_eq!(
        few.reason,
        "the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2)"
    );
    assert_eq!(few.again, None, "waiting longer adds no member");
    let alone = judge(&sync, vec![insync(7, 7, (0, 0), &none())], LEFT);
    assert_eq!(
        alone,
        Ok(()),
        "a lone server: no WAIT, the first reply decides"
    );
    let lost_all = judge(&sync, vec![insync(7, 7, (0, 1), &none())], LEFT);
    assert!(lost_all.is_err(), "a master that had replicas and has none");
}

#[test]
fn one_more_wait_only_when_a_member_may_still_acknowledge_in_time() {
    let sync = Sync::to_replicas();
    let before = insync(100, 80, (2, 1), &none());
    let after = insync(100, 90, (2, 1), &none());
    let tail = |waited: i64| vec![before.clone(), Value::Int(waited), after.clone()];
    assert_eq!(
        judge(&sync, tail(1), LEFT).expect_err("late").again,
        Some(2)
    );
    assert_eq!(
        judge(&sync, tail(1), Duration::ZERO)
            .expect_err("late")
            .again,
        None,
        "no time left"
    );
    assert_eq!(
        judge(&sync, tail(2), LEFT).expect_err("late").again,
        None,
        "as many acknowledged the WAIT as there are members"
    );
    let first = judge(&sync, vec![before.clone()], LEFT);
    assert_eq!(
        first.expect_err("no WAIT yet").again,
        Some(2),
        "the first write to a master with replicas"
    );

    // The one more try is read in place of the first WAIT and the last LOCK.INSYNC, and judged
    // against the first offset.
    let mut check = Check::read(&sync, tail(1)).expect("read");
    let again = vec![Value::Int(2), insync(130, 100, (2, 1), &none())];
    check.reread(&sync, again).expect("reread");
    let judged = check.judge(&sync, &mut Seen::default(), &[None], Duration::ZERO);
    assert_eq!(judged, Ok(()));
}

#[test]
fn a_master_seen_replaced_counts_no_write() {
    let sync = Sync::to_replicas();
    let mut seen = Seen::default();
    let old = insync(10, 10, (0, 0), &none());
    let check = Check::read(&sync, vec![old.clone()]).expect("read");
    assert_eq!(check.judge(&sync, &mut seen, &[None], LEFT), Ok(()));
    // A promoted replica names the old master's ID as its replid2.
    let promoted = Value::Array(vec![
        Value::Int(20),
        Value::Int(20),
        Value::Int(0),
        Value::Int(0),
        Value::BulkString(OTHER.into()),
        Value::BulkString(ID.into()),
    ]);
    let check = Check::read(&sync, vec![promoted]).expect("read");
    let slot = Slot::new(7);
    assert_eq!(check.judge(&sync, &mut seen, &[slot], LEFT), Ok(()));
    let check = Check::read(&sync, vec![old]).expect("read");
    let refused = check.judge(&sync, &mut seen, &[None], LEFT);
    let refused = refused.expect_err("the old master, still taking writes");
    assert_eq!(
        refused,
        Refusal {
            reason: "the master was replaced (a failover): none of its writes count".to_owned(),
            again: None
        }
    );
}

#[test]
fn the_hint_is_the_set_last_heard_where_the_writes_go() {
    let sync = Sync::to_replicas();
    let mut seen = Seen::default();
    let (one, seven) = (None, Slot::new(7));
    assert_eq!(seen.hint(&[one]), 0, "nothing heard yet");
    let check = Check::read(&sync, vec![insync(5, 5, (2, 1), &none())]).expect("read");
    let _ = check.judge(&sync, &mut seen, &[one], LEFT);
    assert_eq!((seen.hint(&[one]), seen.hint(&[seven])), (2, 0));
    let check = Check::read(&sync, vec![insync(5, 5, (1, 1), &none())]).expect("read");
    let _ = check.judge(&sync, &mut seen, &[one], LEFT);
    assert_eq!(seen.hint(&[one]), 1, "lowered with the set");
    assert_eq!(seen.hint(&[one, seven]), 1);
}

#[test]
fn a_fixed_count_is_what_wait_counts_and_waitaof_needs_the_masters_fsync() {
    let sync = Sync::exactly(2);
    assert_eq!(judge(&sync, vec![Value::Int(2)], LEFT), Ok(()));
    let short = judge(&sync, vec![Value::Int(1)], LEFT).expect_err("one short");
    assert_eq!(
        short.reason,
        "1 of the 2 replicas asked for acknowledged within 1000 ms"
    );
    assert_eq!(judge(&Sync::off(), Vec::new(), LEFT), Ok(()));
    let aof = sync.with_aof(true);
    let fsynced = |local: i64| vec![Value::Array(vec![Value::Int(local), Value::Int(2)])];
    assert_eq!(judge(&aof, fsynced(1), LEFT), Ok(()));
    let refused = judge(&aof, fsynced(0), LEFT).expect_err("not on the master's disk");
    assert_eq!(
        refused.reason,
        "the master did not fsync its AOF within 1000 ms"
    );
    let insync_aof = Sync::to_replicas().with_aof(true);
    let tail = vec![
        insync(10, 10, (0, 0), &none()),
        Value::Array(vec![Value::Int(0), Value::Int(0)]),
        insync(10, 10, (0, 0), &none()),
    ];
    assert!(
        judge(&insync_aof, tail, LEFT).is_err(),
        "in-sync, not fsynced"
    );
}
