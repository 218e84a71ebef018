use super::*;

const RUNID: &str = "6c1a0f0d9b0e4a6f8a9c3e1d2b7f5a4c3d2e1f0a";

fn hello(name: &str, master: &str, config_epoch: u64) -> Hello {
    let master = master.replace(':', ",");
    let payload = format!("127.0.0.1,26379,{RUNID},7,{name},{master},{config_epoch}");
    parse_hello(payload.as_bytes()).expect("a hello")
}

/// A Sentinel at `port` heard at `now`, watching `g` (`heard`'s address is the caller's).
fn heard(deployment: &mut Deployment, now: u64, port: u16) -> bool {
    let address = format!("127.0.0.1:{port}");
    deployment.heard(now, &address, &hello("g", "10.0.0.1:6379", 1))
}

/// What a Sentinel says with `down-after-milliseconds` `down_after_ms` and no word on a master.
fn down_after(down_after_ms: u64) -> Said {
    Said {
        down_after_ms,
        master: None,
        runid: None,
        last_ok_ms: None,
        sentinels: None,
        failover_timeout_ms: None,
    }
}

/// What a Sentinel says naming `master` at `epoch`, with run id `runid`.
fn naming(master: &str, epoch: u64, runid: Option<&str>) -> Said {
    Said {
        down_after_ms: 30_000,
        master: Some((master.to_owned(), epoch)),
        runid: runid.map(str::to_owned),
        last_ok_ms: None,
        sentinels: None,
        failover_timeout_ms: None,
    }
}

#[test]
fn a_sentinels_hello_is_read_and_anything_else_refused() {
    let payload = format!("10.0.0.9,26379,{RUNID},12,mymaster,10.0.0.1,6380,4");
    let read = parse_hello(payload.as_bytes()).expect("read");
    assert_eq!(
        read,
        Hello {
            port: 26379,
            runid: RUNID.to_owned(),
            master_name: "mymaster".to_owned(),
            master: "10.0.0.1:6380".to_owned(),
            config_epoch: 4,
        }
    );
    assert_eq!(read.link_id(), "6c1a0f0d");
    let with_runid = |runid: &str| format!("10.0.0.9,26379,{runid},12,mymaster,10.0.0.1,6380,4");
    for runid in ["abc", &RUNID[1..], &RUNID.replace('6', "g")] {
        assert_eq!(parse_hello(with_runid(runid).as_bytes()), None, "{runid}");
    }
    for bad in [
        &b""[..],
        b"hello",
        b"10.0.0.9,26379,abc,12,mymaster,10.0.0.1,6380",
        b"10.0.0.9,26379,abc,12,mymaster,10.0.0.1,6380,4,extra",
        b"10.0.0.9,0,abc,12,mymaster,10.0.0.1,6380,4",
        b"10.0.0.9,70000,abc,12,mymaster,10.0.0.1,6380,4",
        b"10.0.0.9,26379,abc,-1,mymaster,10.0.0.1,6380,4",
        b"10.0.0.9,26379,abc,12,mymaster,10.0.0.1,6380,x",
        b",26379,abc,12,mymaster,10.0.0.1,6380,4",
        b"10.0.0.9,26379,abc,12,,10.0.0.1,6380,4",
        b"10.0.0.9,26379,abc,12,mymaster,10.0.0.1,6380,\xff",
    ] {
        assert_eq!(parse_hello(bad), None, "{}", String::from_utf8_lossy(bad));
    }
    let long = format!(
        "10.0.0.9,26379,abc,12,{},10.0.0.1,6380,4",
        "n".repeat(2_000)
    );
    assert_eq!(parse_hello(long.as_bytes()), None);
}

#[test]
fn a_sentinels_down_after_is_read_from_its_master_fields() {
    let reply = [
        "name",
        "mymaster",
        "flags",
        "master",
        "down-after-milliseconds",
        "5000",
        "failover-timeout",
        "180000",
    ];
    assert_eq!(
        sentinel_master(&reply),
        Some(Said {
            failover_timeout_ms: Some(180_000),
            ..down_after(5_000)
        })
    );
    let full = [
        "name",
        "mymaster",
        "ip",
        "10.0.0.1",
        "port",
        "6380",
        "runid",
        RUNID,
        "down-after-milliseconds",
        "5000",
        "config-epoch",
        "4",
        "last-ok-ping-reply",
        "731",
        "num-other-sentinels",
        "2",
    ];
    assert_eq!(
        sentinel_master(&full),
        Some(Said {
            down_after_ms: 5_000,
            master: Some(("10.0.0.1:6380".to_owned(), 4)),
            runid: Some(RUNID.to_owned()),
            last_ok_ms: Some(731),
            sentinels: Some(3),
            failover_timeout_ms: None,
        })
    );
    let unread = full.map(|field| if field == RUNID { "" } else { field });
    assert_eq!(
        sentinel_master(&unread).and_then(|said| said.runid),
        None,
        "no INFO read yet"
    );
    assert_eq!(sentinel_master(&["name", "mymaster"]), None);
    assert_eq!(sentinel_master(&["down-after-milliseconds", "soon"]), None);
    assert_eq!(
        sentinel_master(&["down-after-milliseconds", "86400001"]),
        None
    );
    assert_eq!(
        sentinel_master(&["flags", "down-after-milliseconds", "x"]),
        None,
        "a value is not a name"
    );
}

#[test]
fn nothing_learned_is_sentinels_defaults() {
    let deployment = Deployment::default();
    assert_eq!(deployment.failover(), Failover::default_sentinel());
    assert_eq!(deployment.failover().ms, 36_000);
    assert_eq!(deployment.sentinels(), 0);
}

#[test]
fn each_sentinel_is_asked_and_the_longest_wins() {
    let mut deployment = Deployment::default();
    assert!(heard(&mut deployment, 0, 26379));
    assert!(!heard(&mut deployment, 10, 26379), "known");
    assert!(heard(&mut deployment, 20, 26380));
    assert_eq!(deployment.sentinels(), 2);
    let asked = deployment.to_ask(30);
    assert_eq!(
        asked,
        [
            ("127.0.0.1:26379".to_owned(), "g".to_owned()),
            ("127.0.0.1:26380".to_owned(), "g".to_owned())
        ]
    );
    assert!(deployment.to_ask(31).is_empty(), "asked: retried later");
    assert!(deployment.answered(40, "127.0.0.1:26379", "g", down_after(5_000)));
    assert_eq!(
        deployment.failover().ms,
        11_000,
        "one Sentinel has not answered: it counts as the other"
    );
    assert!(deployment.answered(50, "127.0.0.1:26380", "g", down_after(8_000)));
    assert_eq!(
        deployment.failover(),
        Failover {
            ms: 14_000,
            source: Source::Sentinel {
                address: "127.0.0.1:26380".to_owned(),
                down_after_ms: 8_000
            }
        }
    );
    assert_eq!(
        deployment.to_ask(39 + SENTINEL_ASK_MS),
        [],
        "both answered: asked again later"
    );
    assert_eq!(deployment.to_ask(40 + SENTINEL_ASK_MS).len(), 1);
    assert!(!deployment.answered(
        41 + SENTINEL_ASK_MS,
        "127.0.0.1:26379",
        "g",
        down_after(5_000)
    ));
    assert!(
        !deployment.answered(42, "127.0.0.1:9", "g", down_after(1)),
        "not heard of"
    );
}

#[test]
fn a_sentinel_not_heard_from_is_forgotten() {
    let mut deployment = Deployment::default();
    heard(&mut deployment, 0, 26379);
    deployment.to_ask(0);
    deployment.answered(0, "127.0.0.1:26379", "g", down_after(60_000));
    assert_eq!(deployment.failover().ms, 66_000);
    deployment.to_ask(SENTINEL_FORGET_MS);
    assert_eq!(deployment.sentinels(), 0);
    assert_eq!(deployment.failover(), Failover::default_sentinel());
}

#[test]
fn a_kept_value_stands_in_until_a_sentinel_answers() {
    let mut deployment = Deployment::default();
    deployment.keep(Failover {
        ms: 66_000,
        source: Source::Sentinel {
            address: "10.0.0.9:26379".to_owned(),
            down_after_ms: 60_000,
        },
    });
    let kept = deployment.failover();
    assert_eq!(kept.ms, 66_000);
    assert_eq!(
        kept.source.describe(),
        "kept: sentinel 10.0.0.9:26379 down-after-milliseconds 60000"
    );
    deployment.keep(kept.clone());
    assert_eq!(
        deployment.failover().source.describe(),
        kept.source.describe(),
        "kept twice reads the same"
    );
    heard(&mut deployment, 0, 26379);
    deployment.to_ask(0);
    deployment.answered(0, "127.0.0.1:26379", "g", down_after(5_000));
    assert_eq!(deployment.failover().ms, 11_000, "what is in force now");
}

#[test]
fn a_cluster_fails_over_in_about_twice_its_node_timeout() {
    let mut deployment = Deployment::default();
    deployment.cluster(15_000);
    assert_eq!(
        deployment.failover(),
        Failover {
            ms: 35_000,
            source: Source::Cluster {
                node_timeout_ms: 15_000
            }
        }
    );
    deployment.cluster(5_000);
    assert_eq!(deployment.failover().ms, 15_000);
    assert_eq!(
        deployment.failover().source.describe(),
        "cluster-node-timeout 5000"
    );
}

#[test]
fn the_newest_config_epoch_answered_is_the_sentinels_word() {
    let mut deployment = Deployment::default();
    heard(&mut deployment, 0, 26379);
    heard(&mut deployment, 0, 26380);
    assert_eq!(deployment.config_epoch(), None, "hellos are not believed");
    assert_eq!(deployment.named_master(), None);
    deployment.answered(
        0,
        "127.0.0.1:26379",
        "g",
        naming("10.0.0.1:6379", 3, Some(RUNID)),
    );
    deployment.answered(0, "127.0.0.1:26380", "g", naming("10.0.0.2:6379", 2, None));
    assert_eq!(deployment.config_epoch(), Some(3));
    assert_eq!(
        deployment.named_master(),
        Some(Named {
            group: "g".to_owned(),
            master: "10.0.0.1:6379".to_owned(),
            epoch: 3,
            runid: Some(RUNID.to_owned()),
        })
    );
    deployment.answered(1, "127.0.0.1:26380", "g", naming("10.0.0.2:6379", 4, None));
    assert_eq!(
        deployment
            .named_master()
            .map(|named| (named.master, named.epoch)),
        Some(("10.0.0.2:6379".to_owned(), 4))
    );
}

#[test]
fn a_group_monitored_anew_starts_its_epochs_again() {
    let mut deployment = Deployment::default();
    heard(&mut deployment, 0, 26379);
    deployment.answered(0, "127.0.0.1:26379", "g", naming("10.0.0.1:6379", 9, None));
    assert_eq!(deployment.config_epoch(), Some(9));
    // SENTINEL REMOVE g, SENTINEL MONITOR h: its hellos name the new group.
    let renamed = hello("h", "10.0.0.1:6379", 0);
    deployment.heard(1, "127.0.0.1:26379", &renamed);
    assert_eq!(
        deployment.config_epoch(),
        None,
        "the old group's answer is gone"
    );
    assert_eq!(
        deployment.to_ask(1),
        [("127.0.0.1:26379".to_owned(), "h".to_owned())]
    );
    deployment.answered(2, "127.0.0.1:26379", "h", naming("10.0.0.1:6379", 0, None));
    assert_eq!(deployment.config_epoch(), Some(0));
    // A Sentinel that is forgotten takes its epoch with it.
    deployment.to_ask(2 + SENTINEL_FORGET_MS);
    assert_eq!(deployment.config_epoch(), None);
}

#[test]
fn a_hello_that_differs_from_the_answer_has_the_sentinel_asked_again_soon() {
    let mut deployment = Deployment::default();
    heard(&mut deployment, 0, 26379);
    assert_eq!(deployment.to_ask(0).len(), 1);
    deployment.answered(10, "127.0.0.1:26379", "g", naming("10.0.0.1:6379", 1, None));
    let same = hello("g", "10.0.0.1:6379", 1);
    deployment.heard(500, "127.0.0.1:26379", &same);
    assert!(
        deployment.to_ask(2_000).is_empty(),
        "the same word: asked on its period"
    );
    let newer = hello("g", "10.0.0.2:6379", 2);
    deployment.heard(600, "127.0.0.1:26379", &newer);
    assert!(
        deployment.to_ask(900).is_empty(),
        "not twice within HINT_MS"
    );
    assert_eq!(deployment.to_ask(HINT_MS).len(), 1, "asked again");
    assert_eq!(
        deployment.config_epoch(),
        Some(1),
        "the hello itself changes nothing"
    );
    deployment.answered(
        HINT_MS,
        "127.0.0.1:26379",
        "g",
        naming("10.0.0.2:6379", 2, None),
    );
    deployment.hasten();
    assert!(deployment.to_ask(HINT_MS + 500).is_empty());
    assert_eq!(
        deployment.to_ask(2 * HINT_MS).len(),
        1,
        "hastened while its word names another master"
    );
}

#[test]
fn a_master_named_by_its_run_id_is_this_server() {
    let other = "0000000000000000000000000000000000000001";
    let me = |id: &str| id == "10.0.0.1:6379";
    let named = |master: &str, runid: Option<&str>| Named {
        group: "g".to_owned(),
        master: master.to_owned(),
        epoch: 1,
        runid: runid.map(str::to_owned),
    };
    assert!(named("10.0.0.1:6379", None).names_me(me, RUNID));
    assert!(
        named("10.0.0.1:6379", Some(other)).names_me(me, RUNID),
        "its own address, with the run id from before a restart"
    );
    assert!(
        named("203.0.113.5:16379", Some(RUNID)).names_me(me, RUNID),
        "behind NAT"
    );
    assert!(!named("10.0.0.2:6379", Some(other)).names_me(me, RUNID));
    assert!(
        !named("10.0.0.2:6379", None).names_me(me, RUNID),
        "not read yet: another server, until the next answer"
    );
}

#[test]
fn a_master_is_replaced_by_a_newer_word_naming_another() {
    let word = |group: &str, master: &str, epoch| Named {
        group: group.to_owned(),
        master: master.to_owned(),
        epoch,
        runid: None,
    };
    let mine = word("g", "10.0.0.1:6379", 5);
    let other = |epoch| word("g", "10.0.0.2:6379", epoch);
    let mut returned = Record::default();
    assert_eq!(returned.replaced_by(None, false), None, "no Sentinel");
    assert_eq!(
        returned.replaced_by(Some(&other(5)), false),
        Some("10.0.0.2:6379".to_owned()),
        "back after a failover it never saw"
    );

    let mut master = Record::default();
    assert_eq!(master.replaced_by(Some(&mine), true), None);
    assert_eq!(
        master.replaced_by(Some(&other(5)), false),
        None,
        "a word no newer than the one that named it"
    );
    assert_eq!(
        master.replaced_by(Some(&other(6)), false),
        Some("10.0.0.2:6379".to_owned()),
        "failed over while cut off"
    );
    assert_eq!(
        master.replaced_by(Some(&word("h", "10.0.0.2:6379", 1)), false),
        Some("10.0.0.2:6379".to_owned()),
        "a group monitored anew: its epochs start again"
    );
    let mut readdressed = Record::default();
    readdressed.replaced_by(Some(&mine), true);
    readdressed.readdressed();
    assert_eq!(
        readdressed.replaced_by(Some(&mine), false),
        Some("10.0.0.1:6379".to_owned()),
        "the same word, checked again"
    );

    let mut promoted = Record::default();
    promoted.replaced_by(Some(&word("g", "10.0.0.1:6379", 1)), true);
    promoted.promoted();
    assert_eq!(
        promoted.replaced_by(Some(&other(7)), false),
        None,
        "just promoted: the Sentinels have not caught up"
    );
    assert_eq!(
        promoted.replaced_by(Some(&word("g", "10.0.0.1:6379", 8)), true),
        None
    );
    assert_eq!(
        promoted.replaced_by(Some(&other(9)), false),
        Some("10.0.0.2:6379".to_owned())
    );
}

#[test]
fn no_more_than_so_many_sentinels_are_kept() {
    let mut deployment = Deployment::default();
    for port in 1..=u16::try_from(MAX_SENTINELS + 10).expect("a port") {
        heard(&mut deployment, 0, port);
    }
    assert_eq!(deployment.to_ask(0).len(), MAX_SENTINELS);
    assert!(deployment.knows("127.0.0.1:1"));
    assert!(!deployment.knows("127.0.0.1:70"));
}

#[test]
fn a_servers_role_is_read_from_its_role_reply() {
    assert_eq!(
        role(&["slave", "10.0.0.7", "6380", "connected", "1234"]),
        Some(Role {
            master: false,
            master_address: Some("10.0.0.7:6380".to_owned()),
        })
    );
    assert_eq!(
        role(&["master", "1234"]),
        Some(Role {
            master: true,
            master_address: None,
        })
    );
    for bad in [
        &["sentinel", "mymaster"][..],
        &["slave", "10.0.0.7"],
        &["slave", "10.0.0.7", "port"],
        &[],
    ] {
        assert_eq!(role(bad), None, "{bad:?}");
    }
}

/// What a Sentinel of three says naming `master`, its last valid `PING` reply `last_ok_ms` ago.
fn pinged(master: &str, last_ok_ms: u64) -> Said {
    Said {
        last_ok_ms: Some(last_ok_ms),
        sentinels: Some(3),
        ..naming(master, 1, None)
    }
}

#[test]
fn the_sentinels_say_when_they_last_had_the_masters_reply() {
    let mut deployment = Deployment::default();
    for port in [26379, 26380, 26381] {
        heard(&mut deployment, 0, port);
    }
    assert_eq!(deployment.majority(), 2);
    let at = |port: u16| format!("127.0.0.1:{port}");
    deployment.answered(10_000, &at(26379), "g", pinged("m:1", 500));
    deployment.answered(10_000, &at(26380), "g", pinged("m:1", 800));
    let names_m = |said: &Said| said.master.as_ref().is_some_and(|(m, _)| m == "m:1");
    assert!(deployment.master_answered_between(names_m, 9_000, 9_600));
    assert!(
        !deployment.master_answered_between(names_m, 9_600, 12_000),
        "one Sentinel had a reply then, not a majority"
    );
    assert_eq!(deployment.master_silent_since("m:1", 9_000), Some(9_500));
    assert_eq!(deployment.master_silent_since("m:1", 10_001), None, "stale");
    assert_eq!(deployment.master_silent_since("other:1", 0), None);
    deployment.answered(20_000, &at(26379), "g", pinged("m:1", 10_500));
    deployment.answered(20_000, &at(26380), "g", pinged("m:1", 10_800));
    assert_eq!(
        deployment.master_silent_since("m:1", 19_000),
        Some(9_500),
        "no reply since: the same times"
    );
    assert!(
        deployment.master_answered_between(names_m, 9_000, 9_600),
        "earlier replies are kept"
    );
    deployment.answered(21_000, &at(26380), "g", pinged("n:1", 10));
    assert_eq!(
        deployment.master_silent_since("m:1", 19_000),
        None,
        "one names another master now"
    );
    assert_eq!(deployment.failover_timeout_ms(), 180_000);
}
