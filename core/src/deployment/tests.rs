use super::*;

fn hello(sentinel_port: u16, name: &str, config_epoch: u64) -> Hello {
    let payload = format!(
        "127.0.0.1,{sentinel_port},6c1a0f0d9b0e4a6f8a9c3e1d2b7f5a4c3d2e1f0a,7,{name},10.0.0.1,6379,{config_epoch}"
    );
    parse_hello(payload.as_bytes()).expect("a hello")
}

#[test]
fn a_sentinels_hello_is_read_and_anything_else_refused() {
    let read = parse_hello(b"10.0.0.9,26379,abc,12,mymaster,10.0.0.1,6380,4").expect("read");
    assert_eq!(
        read,
        Hello {
            sentinel: "10.0.0.9:26379".to_owned(),
            master_name: "mymaster".to_owned(),
            master: "10.0.0.1:6380".to_owned(),
            config_epoch: 4,
        }
    );
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
    assert_eq!(sentinel_master(&reply), Some(5_000));
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
    assert!(!deployment.watched_by_sentinel());
}

#[test]
fn each_sentinel_is_asked_and_the_longest_wins() {
    let mut deployment = Deployment::default();
    assert!(deployment.heard(0, &hello(26379, "g", 1)));
    assert!(!deployment.heard(10, &hello(26379, "g", 1)), "known");
    assert!(deployment.heard(20, &hello(26380, "g", 1)));
    assert!(deployment.watched_by_sentinel());
    let asked = deployment.to_ask(30);
    assert_eq!(
        asked,
        [
            ("127.0.0.1:26379".to_owned(), "g".to_owned()),
            ("127.0.0.1:26380".to_owned(), "g".to_owned())
        ]
    );
    assert!(deployment.to_ask(31).is_empty(), "asked: retried later");
    assert!(deployment.answered(40, "127.0.0.1:26379", "g", 5_000));
    assert_eq!(
        deployment.failover().ms,
        11_000,
        "one Sentinel has not answered: it counts as the other"
    );
    assert!(deployment.answered(50, "127.0.0.1:26380", "g", 8_000));
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
        deployment.to_ask(30 + SENTINEL_RETRY_MS),
        [],
        "both answered: asked again later"
    );
    assert_eq!(deployment.to_ask(40 + SENTINEL_ASK_MS).len(), 1);
    assert!(!deployment.answered(41 + SENTINEL_ASK_MS, "127.0.0.1:26379", "g", 5_000));
    assert!(
        !deployment.answered(42, "127.0.0.1:9", "g", 1),
        "not heard of"
    );
}

#[test]
fn a_sentinel_not_heard_from_is_forgotten() {
    let mut deployment = Deployment::default();
    deployment.heard(0, &hello(26379, "g", 1));
    deployment.to_ask(0);
    deployment.answered(0, "127.0.0.1:26379", "g", 60_000);
    assert_eq!(deployment.failover().ms, 66_000);
    deployment.to_ask(SENTINEL_FORGET_MS);
    assert!(!deployment.watched_by_sentinel());
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
    deployment.heard(0, &hello(26379, "g", 1));
    deployment.to_ask(0);
    deployment.answered(0, "127.0.0.1:26379", "g", 5_000);
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
fn the_newest_config_epoch_is_kept() {
    let mut deployment = Deployment::default();
    assert_eq!(deployment.config_epoch(), None);
    deployment.heard(0, &hello(26379, "g", 3));
    deployment.heard(0, &hello(26380, "g", 2));
    assert_eq!(deployment.config_epoch(), Some(3));
}

#[test]
fn the_newest_word_names_the_master() {
    let mut deployment = Deployment::default();
    assert_eq!(deployment.named_master(), None);
    let mut named = |epoch, master: &str| {
        let payload = format!("127.0.0.1,26379,abc,9,g,{master},{epoch}");
        deployment.heard(0, &parse_hello(payload.as_bytes()).expect("a hello"));
        deployment
            .named_master()
            .map(|(master, epoch)| (master.to_owned(), epoch))
    };
    assert_eq!(
        named(3, "10.0.0.1,6379"),
        Some(("10.0.0.1:6379".to_owned(), 3))
    );
    assert_eq!(
        named(2, "10.0.0.2,6379"),
        Some(("10.0.0.1:6379".to_owned(), 3)),
        "an older word"
    );
    assert_eq!(
        named(4, "10.0.0.2,6379"),
        Some(("10.0.0.2:6379".to_owned(), 4))
    );
}

#[test]
fn a_master_replaced_follows_the_master_named() {
    let me = |id: &str| id == "10.0.0.1:6379";
    let mut returned = Record::default();
    assert_eq!(returned.replaced_by(None, me), None, "no Sentinel");
    assert_eq!(
        returned.replaced_by(Some(("10.0.0.2:6379", 5)), me),
        Some("10.0.0.2:6379".to_owned()),
        "back after a failover it never saw"
    );

    let mut master = Record::default();
    assert_eq!(master.replaced_by(Some(("10.0.0.1:6379", 5)), me), None);
    assert_eq!(
        master.replaced_by(Some(("10.0.0.2:6379", 5)), me),
        None,
        "a word no newer than the one that named it"
    );
    assert_eq!(
        master.replaced_by(Some(("10.0.0.2:6379", 6)), me),
        Some("10.0.0.2:6379".to_owned()),
        "failed over while cut off"
    );
    let mut readdressed = Record::default();
    readdressed.replaced_by(Some(("10.0.0.1:6379", 5)), me);
    readdressed.readdressed();
    let now_me = |id: &str| id == "192.168.0.1:6379";
    assert_eq!(
        readdressed.replaced_by(Some(("10.0.0.1:6379", 5)), now_me),
        Some("10.0.0.1:6379".to_owned()),
        "the same word, checked again (the module asks who is there before following)"
    );

    let mut promoted = Record::default();
    promoted.replaced_by(Some(("10.0.0.1:6379", 1)), me);
    promoted.promoted();
    assert_eq!(
        promoted.replaced_by(Some(("10.0.0.2:6379", 7)), me),
        None,
        "just promoted: the Sentinels have not caught up"
    );
    assert_eq!(promoted.replaced_by(Some(("10.0.0.1:6379", 8)), me), None);
    assert_eq!(
        promoted.replaced_by(Some(("10.0.0.2:6379", 9)), me),
        Some("10.0.0.2:6379".to_owned())
    );
}

#[test]
fn no_more_than_so_many_sentinels_are_kept() {
    let mut deployment = Deployment::default();
    for port in 1..=u16::try_from(MAX_SENTINELS + 10).expect("a port") {
        deployment.heard(0, &hello(port, "g", 1));
    }
    assert_eq!(deployment.to_ask(0).len(), MAX_SENTINELS);
    assert!(deployment.knows("127.0.0.1:1"));
    assert!(!deployment.knows("127.0.0.1:70"));
}

#[test]
fn a_servers_identity_is_read_from_its_info() {
    let id = "c5b1b4f5e1d6a7b8c9d0e1f2a3b4c5d6e7f8a9b0";
    let info = format!(
        "# Server\r\nredis_version:7.0.15\r\nrun_id:{id}\r\n\r\n# Replication\r\nrole:slave\r\n\
         master_host:10.0.0.7\r\nmaster_port:6380\r\n"
    );
    assert_eq!(
        identity(&info),
        Some(Identity {
            run_id: id.to_owned(),
            master: false,
            master_address: Some("10.0.0.7:6380".to_owned()),
        })
    );
    let master = info.replace("role:slave", "role:master");
    assert!(
        identity(&master)
            .is_some_and(|identity| identity.master && identity.master_address.is_none())
    );
    for bad in [
        "role:master\r\n".to_owned(),
        format!("run_id:{id}\r\n"),
        format!("run_id:{id}\r\nrole:sentinel\r\n"),
        "run_id:short\r\nrole:master\r\n".to_owned(),
        format!("run_id:{}\r\nrole:master\r\n", "z".repeat(40)),
    ] {
        assert_eq!(identity(&bad), None, "{bad}");
    }
}
