use super::*;

const LIMITS: Limits = Limits {
    max_ttl_ms: 0,
    max_keys: 4,
};

fn words(line: &str) -> Vec<&[u8]> {
    line.split(' ').map(str::as_bytes).collect()
}

#[test]
fn integers_are_read_as_redis_reads_them() {
    for (text, value) in [
        ("0", Some(0)),
        ("7", Some(7)),
        ("-7", Some(-7)),
        ("9223372036854775807", Some(i64::MAX)),
        ("-9223372036854775808", Some(i64::MIN)),
        ("9223372036854775808", None),
        ("-0", None),
        ("007", None),
        ("+7", None),
        (" 7", None),
        ("7 ", None),
        ("", None),
        ("-", None),
        ("1e3", None),
    ] {
        assert_eq!(integer(text.as_bytes()), value, "{text:?}");
    }
}

#[test]
fn integers_agree_with_their_decimal_form() {
    let mut n: i64 = 1;
    for _ in 0..200 {
        for value in [n, -n, n - 1, 1 - n] {
            assert_eq!(integer(value.to_string().as_bytes()), Some(value));
        }
        n = n.wrapping_mul(3).wrapping_add(1) & i64::MAX;
    }
}

#[test]
fn acquire_takes_its_options_in_any_order_once() {
    let args = words("LOCK.ACQUIRE k o 100 wait 5 SHARED limit 3 Reentrant");
    let parsed = acquire(&args, &LIMITS).expect("parsed");
    assert_eq!((*parsed.key, *parsed.owner), (&b"k"[..], &b"o"[..]));
    assert_eq!(parsed.ttl_ms, 100);
    assert!(parsed.reentrant);
    assert_eq!(parsed.wait_ms, Some(5));
    assert_eq!(parsed.mode, Mode::Shared(Some(3)));
    for (line, error) in [
        ("LOCK.ACQUIRE k o", ArgError::WrongArity),
        ("LOCK.ACQUIRE k o 100 SHARED SHARED", ArgError::Syntax),
        ("LOCK.ACQUIRE k o 100 LIMIT 3", ArgError::Syntax),
        ("LOCK.ACQUIRE k o 100 WAIT", ArgError::Syntax),
        ("LOCK.ACQUIRE k o 100 WAIT x", ArgError::TimeoutNotInteger),
        ("LOCK.ACQUIRE k o 100 WAIT -1", ArgError::TimeoutNegative),
        ("LOCK.ACQUIRE k o 100 SHARED LIMIT 0", ArgError::NotInteger),
        (
            "LOCK.ACQUIRE k o 100 SHARED LIMIT 2147483648",
            ArgError::NotInteger,
        ),
        ("LOCK.ACQUIRE k o ten", ArgError::NotInteger),
        ("LOCK.ACQUIRE k  100", ArgError::Owner),
    ] {
        assert_eq!(acquire(&words(line), &LIMITS), Err(error), "{line}");
    }
    let capped = Limits {
        max_ttl_ms: 50,
        ..LIMITS
    };
    let args = words("LOCK.ACQUIRE k o 100");
    assert_eq!(acquire(&args, &capped), Err(ArgError::TtlAboveCap(50)));
}

#[test]
fn the_other_single_key_commands() {
    assert_eq!(
        release(&words("LOCK.RELEASE k o x")),
        Err(ArgError::WrongArity)
    );
    assert_eq!(
        release(&words("LOCK.RELEASE k o")).map(|h| *h.owner),
        Ok(&b"o"[..])
    );
    assert_eq!(
        renew(&words("LOCK.RENEW k o 5"), &LIMITS).map(|h| h.ttl_ms),
        Ok(5)
    );
    assert_eq!(
        renew(&words("LOCK.RENEW k  x"), &LIMITS),
        Err(ArgError::Owner)
    );
    assert_eq!(raise(&words("LOCK.RAISE k o 9"), 9).map(|r| r.token), Ok(9));
    for token in ["10", "0", "-1", "x"] {
        let line = format!("LOCK.RAISE k o {token}");
        assert_eq!(raise(&words(&line), 9), Err(ArgError::Token), "{token}");
    }
    assert_eq!(fence(&words("LOCK.FENCE k")).map(|f| f.owner), Ok(None));
    assert_eq!(fence(&words("LOCK.FENCE k o o")), Err(ArgError::WrongArity));
    assert_eq!(info(&words("LOCK.INFO k")).map(|key| &**key), Ok(&b"k"[..]));
    assert_eq!(info(&words("LOCK.INFO")), Err(ArgError::WrongArity));
}

#[test]
fn sets_take_numkeys_keys() {
    let args = words("LOCK.MACQUIRE 2 a b o 100 WAIT 0");
    let parsed = macquire(&args, &LIMITS).expect("parsed");
    assert_eq!(parsed.keys, &words("a b")[..]);
    assert_eq!((parsed.ttl_ms, parsed.wait_ms), (100, Some(0)));
    for (line, error) in [
        ("LOCK.MACQUIRE 0 a o 100", ArgError::NumKeys),
        ("LOCK.MACQUIRE x a o 100", ArgError::NumKeys),
        ("LOCK.MACQUIRE 5 a b c d e o 100", ArgError::TooManyKeys(4)),
        ("LOCK.MACQUIRE 3 a b", ArgError::KeysBeyondArgs),
        (
            "LOCK.MACQUIRE 2 a a o 100",
            ArgError::DuplicateKey("a".into()),
        ),
        ("LOCK.MACQUIRE 1 a o", ArgError::WrongArity),
        (
            "LOCK.MACQUIRE 1 a o 100 shared",
            ArgError::NotSupported("SHARED"),
        ),
        ("LOCK.MACQUIRE 1 a o 100 NX", ArgError::Syntax),
    ] {
        assert_eq!(macquire(&words(line), &LIMITS), Err(error), "{line}");
    }
    assert_eq!(
        mrelease(&words("LOCK.MRELEASE 1 a o"), &LIMITS).map(|s| s.keys.len()),
        Ok(1)
    );
    assert_eq!(
        mrelease(&words("LOCK.MRELEASE 1 a o x"), &LIMITS),
        Err(ArgError::WrongArity)
    );
    assert_eq!(
        mrenew(&words("LOCK.MRENEW 2 a b o 7"), &LIMITS).map(|s| s.ttl_ms),
        Ok(7)
    );
}

#[test]
fn key_positions_answer_any_arguments() {
    assert_eq!(key_positions(&words("LOCK.MACQUIRE 2 a b o 100")), 2..=3);
    assert_eq!(key_positions(&words("LOCK.MACQUIRE 9 a")), 2..=2);
    assert!(key_positions(&words("LOCK.MACQUIRE x a")).is_empty());
    assert!(key_positions(&words("LOCK.MACQUIRE")).is_empty());
}

#[test]
fn every_effect_form_applies() {
    let holds = |line: &str| match apply(&words(line)).map(|a| a.effect) {
        Ok(Applied::Holds {
            holding,
            mode,
            deadline_ms,
        }) => Ok((holding.token, holding.holds, mode, deadline_ms)),
        Ok(Applied::Dropped { owner }) => Err(format!("dropped {owner:?}")),
        Err(error) => Err(error.to_string()),
    };
    assert_eq!(
        holds("LOCK.APPLY k o 7 2 PXAT 99"),
        Ok((7, 2, Mode::Exclusive, Some(99)))
    );
    assert_eq!(
        holds("LOCK.APPLY k o 7 2 99"),
        Ok((7, 2, Mode::Exclusive, Some(99)))
    );
    assert_eq!(
        holds("LOCK.APPLY k o 7 1"),
        Ok((7, 1, Mode::Exclusive, None))
    );
    let shared = holds("LOCK.APPLY k o 7 1 99 SHARED -1");
    assert_eq!(shared, Ok((7, 1, Mode::Shared(None), Some(99))));
    let packed = packed::pack(7, 3, Lease::Until(99));
    let mut args = words("LOCK.APPLY k o");
    args.push(&packed);
    let applied = apply(&args).map(|a| matches!(a.effect, Applied::Holds { .. }));
    assert_eq!(applied, Ok(true));
    assert!(matches!(
        apply(&words("LOCK.APPLY k o DROP")).map(|a| a.effect),
        Ok(Applied::Dropped { owner: b"o" })
    ));
    for line in [
        "LOCK.APPLY k o 0 1 99",
        "LOCK.APPLY k o 7 0 99",
        "LOCK.APPLY k o 7 1 0",
        "LOCK.APPLY k o 7 1 -5",
        "LOCK.APPLY k o 7 1 SHARED 3",
        "LOCK.APPLY k o 7 1 PXAT",
        "LOCK.APPLY k o 7 1 soon",
        "LOCK.APPLY k o DROP x",
        "LOCK.APPLY k o",
    ] {
        assert!(apply(&words(line)).is_err(), "{line}");
    }
}

#[test]
fn promotable_lists_replicas() {
    let parsed = promotable(&words(
        "LOCK.PROMOTABLE 1000 12000 127.0.0.1:6380 [::1]:7000",
    ))
    .unwrap();
    assert_eq!((parsed.until_ms, parsed.timeout_ms), (1000, 12000));
    assert_eq!(parsed.listed, ["127.0.0.1:6380", "[::1]:7000"]);
    assert!(
        promotable(&words("LOCK.PROMOTABLE 1 1"))
            .unwrap()
            .listed
            .is_empty()
    );
    for line in [
        "LOCK.PROMOTABLE",
        "LOCK.PROMOTABLE 1",
        "LOCK.PROMOTABLE 0 1",
        "LOCK.PROMOTABLE 1 -1",
        "LOCK.PROMOTABLE 1 x",
        "LOCK.PROMOTABLE 1 1 nocolon",
    ] {
        assert!(promotable(&words(line)).is_err(), "{line}");
    }
    let waiting = promotable(&words(
        "LOCK.PROMOTABLE 1 1 a:1 notbefore:1800000000000 b:2",
    ))
    .unwrap();
    assert_eq!(waiting.listed, ["a:1", "b:2"]);
    assert_eq!(waiting.not_before_ms, Some(1_800_000_000_000));
    let challenged = promotable(&words("LOCK.PROMOTABLE 1 1 challenge:0a1b a:1")).unwrap();
    assert_eq!(challenged.challenge.as_deref(), Some("0a1b"));
    assert_eq!(challenged.listed, ["a:1"]);
    assert_eq!(
        promotable(&words("LOCK.PROMOTABLE 1 1 notbefore:soon")).unwrap_err(),
        ArgError::NotInteger
    );
    let long = format!("LOCK.PROMOTABLE 1 1 {}:1", "a".repeat(MAX_REPLICA_ID));
    assert_eq!(promotable(&words(&long)).unwrap_err(), ArgError::Replica);
    let many = format!("LOCK.PROMOTABLE 1 1{}", " a:1".repeat(MAX_LISTED + 1));
    assert_eq!(promotable(&words(&many)).unwrap_err(), ArgError::Replica);
}

#[test]
fn every_write_that_counts_takes_sync_or_nosync_once() {
    let sync = |line: &str| {
        let args = words(line);
        if line.starts_with("LOCK.ACQUIRE") {
            acquire(&args, &LIMITS).map(|a| a.sync)
        } else if line.starts_with("LOCK.RENEW") {
            renew(&args, &LIMITS).map(|h| h.sync)
        } else if line.starts_with("LOCK.MACQUIRE") {
            macquire(&args, &LIMITS).map(|s| s.sync)
        } else {
            mrenew(&args, &LIMITS).map(|s| s.sync)
        }
    };
    let id = "00000000000000ab";
    for (line, parsed) in [
        ("LOCK.ACQUIRE k o 5".to_owned(), Ok(None)),
        ("LOCK.ACQUIRE k o 5 sync WAIT 0".to_owned(), Ok(Some(true))),
        ("LOCK.ACQUIRE k o 5 NOSYNC".to_owned(), Ok(Some(false))),
        (
            "LOCK.ACQUIRE k o 5 SYNC NOSYNC".to_owned(),
            Err(ArgError::Syntax),
        ),
        (
            "LOCK.ACQUIRE k o 5 SYNC SYNC".to_owned(),
            Err(ArgError::Syntax),
        ),
        (
            format!("LOCK.RENEW k o 5 SYNC SESSION {id}"),
            Ok(Some(true)),
        ),
        (
            format!("LOCK.RENEW k o 5 SESSION {id} nosync"),
            Ok(Some(false)),
        ),
        ("LOCK.RENEW k o 5 SYNC x".to_owned(), Err(ArgError::Syntax)),
        (
            "LOCK.MACQUIRE 2 a b o 5 SYNC WAIT 10".to_owned(),
            Ok(Some(true)),
        ),
        ("LOCK.MRENEW 2 a b o 5 NOSYNC".to_owned(), Ok(Some(false))),
        (
            "LOCK.MRENEW 2 a b o 5 SYNC SYNC".to_owned(),
            Err(ArgError::Syntax),
        ),
    ] {
        assert_eq!(sync(&line), parsed, "{line}");
    }
    assert_eq!(
        release(&words("LOCK.RELEASE k o SYNC")),
        Err(ArgError::WrongArity),
        "a release does not wait"
    );
}

#[test]
fn sessions_are_named_by_sixteen_hexadecimal_digits() {
    let id = "00000000000000ab";
    let acquire_line = format!("LOCK.ACQUIRE k o 5 SESSION {id} WAIT 0");
    assert_eq!(
        acquire(&words(&acquire_line), &LIMITS).map(|a| (a.session, a.wait_ms)),
        Ok((Some(0xab), Some(0)))
    );
    let twice = format!("LOCK.ACQUIRE k o 5 SESSION {id} SESSION {id}");
    assert_eq!(acquire(&words(&twice), &LIMITS), Err(ArgError::Syntax));
    assert_eq!(
        acquire(&words("LOCK.ACQUIRE k o 5 SESSION abc"), &LIMITS),
        Err(ArgError::Session(crate::session::SessionError::InvalidId))
    );
    let renew_line = format!("LOCK.RENEW k o 5 SESSION {id}");
    assert_eq!(
        renew(&words(&renew_line), &LIMITS).map(|h| h.session),
        Ok(Some(0xab))
    );
    assert_eq!(
        renew(&words("LOCK.RENEW k o 5 SESSION"), &LIMITS),
        Err(ArgError::Syntax)
    );
    let mrenew_line = format!("LOCK.MRENEW 2 a b o 5 SESSION {id}");
    assert_eq!(
        mrenew(&words(&mrenew_line), &LIMITS).map(|s| s.session),
        Ok(Some(0xab))
    );
    let macquire_line = format!("LOCK.MACQUIRE 1 a o 5 SESSION {id}");
    assert_eq!(
        macquire(&words(&macquire_line), &LIMITS).map(|s| s.session),
        Ok(Some(0xab))
    );
}

#[test]
fn session_subcommands() {
    let parse = |line: &str| session(&words(line), 60_000);
    assert_eq!(
        parse("LOCK.SESSION open"),
        Ok(Session::Open { grace_ms: None })
    );
    assert_eq!(
        parse("LOCK.SESSION OPEN GRACE 100"),
        Ok(Session::Open {
            grace_ms: Some(100)
        })
    );
    for grace in ["99", "60001", "-1", "x"] {
        let line = format!("LOCK.SESSION OPEN GRACE {grace}");
        assert_eq!(parse(&line), Err(ArgError::Grace(100, 60_000)), "{grace}");
    }
    assert_eq!(parse("LOCK.SESSION OPEN GRACE"), Err(ArgError::Syntax));
    assert_eq!(parse("LOCK.SESSION OPEN X"), Err(ArgError::Syntax));
    assert_eq!(
        parse("LOCK.SESSION ATTACH 00000000000000AB"),
        Ok(Session::Attach(0xab))
    );
    assert_eq!(
        parse("LOCK.SESSION close 00000000000000ab"),
        Ok(Session::Close(0xab))
    );
    assert_eq!(
        parse("LOCK.SESSION use 00000000000000ab"),
        Ok(Session::Use(Some(0xab)))
    );
    assert_eq!(parse("LOCK.SESSION USE none"), Ok(Session::Use(None)));
    assert_eq!(
        parse("LOCK.SESSION USE ab"),
        Err(ArgError::Session(crate::session::SessionError::InvalidId))
    );
    assert_eq!(parse("LOCK.SESSION USE"), Err(ArgError::WrongArity));
    assert_eq!(parse("LOCK.SESSION CLOSE"), Err(ArgError::WrongArity));
    assert_eq!(
        parse("LOCK.SESSION CLOSE 00000000000000ab x"),
        Err(ArgError::WrongArity)
    );
    assert_eq!(parse("LOCK.SESSION"), Err(ArgError::WrongArity));
    assert_eq!(
        parse("LOCK.SESSION LIST"),
        Err(ArgError::UnknownSubcommand("LIST".into()))
    );
}

#[test]
fn a_campaign_is_an_exclusive_acquire_with_a_value() {
    let line = words("LOCK.CAMPAIGN e alice 10.0.0.1 5000 SYNC WAIT 0");
    let parsed = campaign(&line, &LIMITS).expect("a campaign");
    assert_eq!(
        (
            parsed.owner,
            parsed.value.copied(),
            parsed.ttl_ms,
            parsed.wait_ms,
            parsed.mode,
            parsed.reentrant,
            parsed.sync
        ),
        (
            &&b"alice"[..],
            Some(&b"10.0.0.1"[..]),
            5000,
            Some(0),
            Mode::Exclusive,
            false,
            Some(true)
        )
    );
    assert_eq!(
        acquire(&words("LOCK.ACQUIRE k o 5000"), &LIMITS).map(|a| a.value),
        Ok(None)
    );
    for (line, error) in [
        ("LOCK.CAMPAIGN e alice v", ArgError::WrongArity),
        ("LOCK.CAMPAIGN e alice v 5000 SHARED", ArgError::Syntax),
        ("LOCK.CAMPAIGN e alice v 5000 REENTRANT", ArgError::Syntax),
        (
            "LOCK.CAMPAIGN e alice v 5000 WAIT 1 WAIT 1",
            ArgError::Syntax,
        ),
        ("LOCK.CAMPAIGN e alice v soon", ArgError::NotInteger),
        ("LOCK.CAMPAIGN e  v 5000", ArgError::Owner),
    ] {
        assert_eq!(campaign(&words(line), &LIMITS).err(), Some(error), "{line}");
    }
    let long = vec![b'v'; MAX_VALUE_LEN + 1];
    let mut args = words("LOCK.CAMPAIGN e alice");
    args.extend([&long[..], b"5000"]);
    assert_eq!(campaign(&args, &LIMITS).err(), Some(ArgError::Value));
}

#[test]
fn proclaim_and_resign_name_a_term_and_observe_what_was_seen() {
    let (proclaimed, resigned) = (words("LOCK.PROCLAIM e 7 v2"), words("LOCK.RESIGN e 7"));
    let proclaim = term(&proclaimed, true).expect("a proclaim");
    assert_eq!(
        (proclaim.epoch, proclaim.value.copied()),
        (7, Some(&b"v2"[..]))
    );
    let resign = term(&resigned, false).expect("a resign");
    assert_eq!((resign.epoch, resign.value), (7, None));
    assert_eq!(
        term(&words("LOCK.RESIGN e 7 v"), false).err(),
        Some(ArgError::WrongArity)
    );
    assert_eq!(
        term(&words("LOCK.RESIGN e -1"), false).err(),
        Some(ArgError::NotInteger)
    );

    let (plain, blocking) = (
        words("LOCK.OBSERVE e"),
        words("LOCK.OBSERVE e BLOCK 0 LAST 7 v"),
    );
    let at_once = observe(&plain).expect("observe");
    assert_eq!((at_once.last, at_once.block_ms), (None, None));
    let leader = observe(&blocking).expect("observe");
    let seen = Seen::Leader {
        epoch: 7,
        value: b"v",
    };
    assert_eq!((leader.last, leader.block_ms), (Some(seen), Some(0)));
    let vacant = words("LOCK.OBSERVE e LAST 0 anything");
    let nobody = observe(&vacant).expect("observe");
    assert_eq!(nobody.last, Some(Seen::Nobody));
    for (line, error) in [
        ("LOCK.OBSERVE e LAST 7", ArgError::Syntax),
        ("LOCK.OBSERVE e LAST x v", ArgError::NotInteger),
        ("LOCK.OBSERVE e BLOCK -1", ArgError::TimeoutNegative),
        ("LOCK.OBSERVE e BLOCK 1 BLOCK 1", ArgError::Syntax),
        ("LOCK.OBSERVE e LAST 0 v LAST 0 v", ArgError::Syntax),
        ("LOCK.OBSERVE e SOON", ArgError::Syntax),
    ] {
        assert_eq!(observe(&words(line)).err(), Some(error), "{line}");
    }
}

#[test]
fn an_effect_carries_a_leaders_value() {
    let value = |args: &[&[u8]]| match apply(args).map(|a| a.effect) {
        Ok(Applied::Holds { holding, .. }) => Ok(holding.owner.value().to_vec()),
        Ok(Applied::Dropped { .. }) => Err("dropped".to_owned()),
        Err(error) => Err(error.to_string()),
    };
    assert_eq!(
        value(&words("LOCK.APPLY k o 7 1 99 VALUE addr")),
        Ok(b"addr".to_vec())
    );
    let packed = packed::pack(7, 1, Lease::Kept);
    let mut args = words("LOCK.APPLY k o");
    args.push(&packed);
    args.extend(words("VALUE addr"));
    assert_eq!(value(&args), Ok(b"addr".to_vec()));
    args.truncate(4);
    args.push(b"addr");
    assert!(value(&args).is_err(), "a value without VALUE");
    assert!(value(&words("LOCK.APPLY k o 7 1 99 SHARED 2 VALUE addr")).is_err());
}

#[test]
fn replconf_takes_a_challenge_a_port_and_an_address() {
    let line = words("LOCK.REPLCONF challenge 0a1b listening-port 6380");
    let said = replconf(&line).unwrap();
    assert_eq!(
        (said.challenge, said.port, said.ip),
        (&b"0a1b"[..], 6380, None)
    );
    let line = words("LOCK.REPLCONF IP-ADDRESS 10.0.0.2 LISTENING-PORT 7000 CHALLENGE x");
    let announced = replconf(&line).unwrap();
    assert_eq!((announced.port, announced.ip), (7000, Some("10.0.0.2")));
    for (line, error) in [
        ("LOCK.REPLCONF challenge x", ArgError::WrongArity),
        (
            "LOCK.REPLCONF challenge x listening-port",
            ArgError::WrongArity,
        ),
        ("LOCK.REPLCONF challenge x challenge y", ArgError::Syntax),
        ("LOCK.REPLCONF challenge x port 1", ArgError::Syntax),
        (
            "LOCK.REPLCONF challenge x listening-port 0",
            ArgError::NotInteger,
        ),
        (
            "LOCK.REPLCONF challenge x listening-port 65536",
            ArgError::NotInteger,
        ),
        (
            "LOCK.REPLCONF challenge x listening-port 1 ip-address",
            ArgError::Syntax,
        ),
        (
            "LOCK.REPLCONF listening-port 1 ip-address a ip-address b",
            ArgError::Syntax,
        ),
        (
            "LOCK.REPLCONF listening-port 1 ip-address a",
            ArgError::Syntax,
        ),
        (
            "LOCK.REPLCONF challenge x listening-port 1 ip-address a,b",
            ArgError::IpAddress,
        ),
    ] {
        assert_eq!(replconf(&words(line)).unwrap_err(), error, "{line}");
    }
}

#[test]
fn guarded_commands_take_their_options_then_the_command() {
    let line = words("LOCK.GUARD k alice TOKEN 42 NOSYNC DECRBY stock 1");
    let parsed = guard(&line).expect("parses");
    assert_eq!(
        (parsed.owner.copied(), parsed.token, parsed.sync),
        (Some(&b"alice"[..]), Some(42), Some(false))
    );
    assert_eq!(parsed.command, &words("DECRBY stock 1")[..]);
    assert_eq!(guarded_command_at(&line, true), Some(6));
    let line = words("LOCK.FENCED f 7 SYNC SET x 1");
    let parsed = fenced(&line).expect("parses");
    assert_eq!(
        (parsed.owner, parsed.token, parsed.sync),
        (None, Some(7), Some(true))
    );
    assert_eq!(parsed.command, &words("SET x 1")[..]);
    assert_eq!(guarded_command_at(&line, false), Some(4));
    // A second word of a kind is the command: `TOKEN` after `TOKEN`, `SYNC` after `NOSYNC`.
    let twice = words("LOCK.GUARD k alice TOKEN 1 TOKEN 2");
    assert_eq!(guard(&twice).map(|parsed| parsed.command.len()), Ok(2));
    assert_eq!(
        fenced(&words("LOCK.FENCED f 7 TOKEN")).map(|p| p.command.len()),
        Ok(1)
    );
    for (line, refused) in [
        ("LOCK.GUARD k alice", ArgError::NoCommand),
        ("LOCK.GUARD k alice TOKEN 5 SYNC", ArgError::NoCommand),
        ("LOCK.GUARD k alice TOKEN", ArgError::Syntax),
        ("LOCK.GUARD k alice TOKEN 0 GET x", ArgError::Token),
        ("LOCK.GUARD k", ArgError::WrongArity),
        ("LOCK.FENCED f 0 GET x", ArgError::Token),
        ("LOCK.FENCED f -3 GET x", ArgError::Token),
        ("LOCK.FENCED f", ArgError::WrongArity),
        ("LOCK.FENCED f 3", ArgError::NoCommand),
    ] {
        let words = words(line);
        let parsed = if line.starts_with("LOCK.GUARD") {
            guard(&words)
        } else {
            fenced(&words)
        };
        assert_eq!(parsed.err(), Some(refused), "{line}");
    }
    assert_eq!(guarded_command_at(&words("LOCK.GUARD k"), true), None);
}

#[test]
fn a_fence_effect_is_four_words_with_fence_in_capitals() {
    assert_eq!(
        apply_fence(&words("LOCK.APPLY f FENCE 9")).map(|(key, token)| (*key, token)),
        Some((&b"f"[..], 9))
    );
    for line in [
        "LOCK.APPLY f fence 9",
        "LOCK.APPLY f FENCE 0",
        "LOCK.APPLY f FENCE 9 1",
        "LOCK.APPLY f FENCE DROP",
    ] {
        assert_eq!(apply_fence(&words(line)), None, "{line}");
    }
    assert!(
        apply(&words("LOCK.APPLY f FENCE 9 1")).is_ok(),
        "a lock's owner FENCE"
    );
}
