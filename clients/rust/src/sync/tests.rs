use super::*;

fn error(text: &str) -> Value {
    redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).expect("an error reply")
}

/// The error a write gets for the error reply `text`.
fn write_error_of(text: &str) -> Error {
    let reply = error(text).extract_error().expect_err("an error");
    write_error(reply)
}

/// A command's arguments joined by spaces.
fn words(command: &Cmd) -> String {
    let arg = |arg: redis::Arg<&[u8]>| match arg {
        redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        _ => "?".to_owned(),
    };
    command.args_iter().map(arg).collect::<Vec<_>>().join(" ")
}

/// Each command of `pipeline`, its arguments joined by spaces.
fn commands(pipeline: &Pipeline) -> Vec<String> {
    pipeline.cmd_iter().map(words).collect()
}

fn acquire() -> Cmd {
    let mut command = redis::cmd("LOCK.ACQUIRE");
    command.arg("k").arg("owner").arg(1_000);
    command
}

#[test]
fn the_in_sync_set_is_asked_of_the_server_with_sync_and_nothing_behind() {
    let sync = Sync::to_replicas();
    assert_eq!(
        words(&sync.marked(&acquire())),
        "LOCK.ACQUIRE k owner 1000 SYNC"
    );
    assert!(sync.tail().is_empty(), "no LOCK.INSYNC, no WAIT");
    assert_eq!(sync.judge(Vec::new()), Ok(()), "the reply itself decides");
    let aof = sync.with_aof(true).timeout(Duration::from_millis(1_500));
    assert_eq!(
        words(&aof.marked(&acquire())),
        "LOCK.ACQUIRE k owner 1000 SYNC"
    );
    assert_eq!(
        commands(&aof.tail()),
        ["WAITAOF 1 0 1500"],
        "the master's own fsync"
    );
}

#[test]
fn a_fixed_count_and_off_say_nosync_and_a_fixed_count_waits_behind() {
    let off = Sync::off();
    assert_eq!(
        words(&off.marked(&acquire())),
        "LOCK.ACQUIRE k owner 1000 NOSYNC"
    );
    assert!(off.tail().is_empty());
    assert_eq!(off.judge(Vec::new()), Ok(()));
    let two = Sync::exactly(2).timeout(Duration::from_micros(300));
    assert_eq!(
        words(&two.marked(&acquire())),
        "LOCK.ACQUIRE k owner 1000 NOSYNC"
    );
    assert_eq!(
        commands(&two.tail()),
        ["WAIT 2 1"],
        "at least 1 ms: 0 would wait for ever"
    );
    assert_eq!(commands(&two.with_aof(true).tail()), ["WAITAOF 1 2 1"]);
}

#[test]
fn a_fixed_count_is_what_wait_counts_and_waitaof_needs_the_masters_fsync() {
    let sync = Sync::exactly(2);
    assert_eq!(sync.judge(vec![Value::Int(2)]), Ok(()));
    assert_eq!(
        sync.judge(vec![Value::Int(1)]),
        Err("1 of the 2 replicas asked for acknowledged within 1000 ms".to_owned())
    );
    let failed = sync.judge(vec![error("ERR WAIT cannot be used")]);
    assert!(failed.expect_err("an error").starts_with("WAIT failed"));
    assert_eq!(sync.judge(Vec::new()), Err("no reply to WAIT".to_owned()));
    let aof = sync.with_aof(true);
    let fsynced = |local: i64, replicas: i64| {
        vec![Value::Array(vec![Value::Int(local), Value::Int(replicas)])]
    };
    assert_eq!(aof.judge(fsynced(1, 2)), Ok(()));
    assert_eq!(
        aof.judge(fsynced(0, 2)),
        Err("the master did not fsync its AOF within 1000 ms".to_owned())
    );
    let insync_aof = Sync::to_replicas().with_aof(true);
    assert_eq!(
        insync_aof.judge(fsynced(1, 0)),
        Ok(()),
        "no replica asked for"
    );
    assert!(insync_aof.judge(fsynced(0, 0)).is_err(), "not fsynced");
}

#[test]
fn noreplicas_is_not_replicated_with_the_reason_up_to_the_semicolon() {
    let text = "NOREPLICAS not every in-sync replica acknowledged within 1000 ms; the grant was \
                released";
    let refused = write_error_of(text);
    let Error::NotReplicated { reason, message } = &refused else {
        panic!("{refused:?}");
    };
    assert_eq!(
        reason,
        "not every in-sync replica acknowledged within 1000 ms"
    );
    assert_eq!(message, text);
    assert!(
        refused.to_string().contains("the grant was released"),
        "{refused}"
    );
    assert!(released_by_server(&refused));
    assert!(!renewed_by_server(&refused));

    let renewal = write_error_of(
        "NOREPLICAS the master has 0 in-sync replicas, fewer than lock.min-insync-replicas (1); \
         the renewal does not count: the lease before it does",
    );
    assert!(
        matches!(&renewal, Error::NotReplicated { reason, .. }
            if reason == "the master has 0 in-sync replicas, fewer than lock.min-insync-replicas (1)"),
        "{renewal:?}"
    );
    assert!(renewed_by_server(&renewal) && !released_by_server(&renewal));

    let replaced =
        write_error_of("NOREPLICAS this server is no longer a master; the grant was released");
    assert!(
        matches!(&replaced, Error::NotReplicated { reason, .. }
            if reason == "this server is no longer a master"),
        "{replaced:?}"
    );

    let unblocked = write_error_of(
        "UNBLOCKED force unblock from blocking operation, instance state changed (master -> \
         replica?)",
    );
    assert!(
        matches!(&unblocked, Error::NotReplicated { reason, message }
            if reason == "this server is no longer a master" && message.starts_with("UNBLOCKED")),
        "{unblocked:?}"
    );
    assert!(released_by_server(&unblocked));

    let client_side = Error::not_replicated("1 of the 2 replicas asked for acknowledged");
    assert!(!released_by_server(&client_side), "the client releases it");
}

#[test]
fn a_syntax_error_means_a_module_without_synced_writes() {
    let old = write_error_of("ERR syntax error");
    assert!(matches!(old, Error::ModuleTooOld { .. }), "{old:?}");
    let message = old.to_string();
    assert!(message.contains("0.7.0"), "{message}");
    assert!(message.contains("ERR syntax error"), "{message}");
    let other = write_error_of("ERR no such session");
    assert!(matches!(other, Error::Redis(_)), "{other:?}");
    let wrong = write_error_of("WRONGTYPE Operation against a key holding the wrong kind of value");
    assert!(matches!(wrong, Error::Redis(_)), "{wrong:?}");
}

#[test]
fn a_guarded_commands_refusals_become_the_clients_errors_and_its_own_errors_stay_as_they_are() {
    let parsed = |text: &str| {
        let reply = error(text);
        guarded_error(reply.extract_error().expect_err("an error reply"))
    };
    let not_held = "NOTHELD the lock is held by another owner; the command did not run";
    assert!(matches!(parsed(not_held), Error::NotHeld { message } if message == not_held));
    let stale = "STALE token 7 is below 9, the largest token that ran a command through this fence";
    assert!(matches!(
        parsed(stale),
        Error::Stale { token: 7, largest: 9, message } if message == stale
    ));
    let unsynced = "NOREPLICAS not every in-sync replica acknowledged within 1000 ms; the command \
                    ran here, but a failover may lose its write";
    assert!(matches!(
        parsed(unsynced),
        Error::NotReplicated { reason, .. }
            if reason == "not every in-sync replica acknowledged within 1000 ms"
    ));
    assert!(
        matches!(parsed("ERR syntax error"), Error::Redis(_)),
        "the command's own syntax error is not the module's age"
    );
    assert!(matches!(
        parsed("WRONGTYPE Operation against a key holding the wrong kind of value"),
        Error::Redis(_)
    ));
}
