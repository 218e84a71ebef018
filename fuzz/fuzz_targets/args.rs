//! Every command's argument parser (`leasehold_core::args`) on any arguments: each answers
//! (no panic), and what it accepts is within the ranges it promises; the in-sync set's
//! reading of `INFO replication` (`leasehold_core::insync`) on any text; a Sentinel's hello, its
//! `SENTINEL MASTER` reply and a server's `ROLE` reply (`leasehold_core::deployment`); and the
//! lease horizon's record (`leasehold_core::horizon`). Numbers are read exactly as their
//! decimal form, as Redis's `string2ll` reads them.
#![no_main]

use std::collections::HashSet;

use leasehold_core::args::{self, Limits};
use leasehold_core::election::Seen;
use leasehold_core::lock::Mode;
use leasehold_core::owner::{MAX_OWNER_LEN, MAX_VALUE_LEN};
use leasehold_core::{deployment, horizon, insync};
use libfuzzer_sys::fuzz_target;

fn owner_ok(owner: &[u8]) -> bool {
    (1..=MAX_OWNER_LEN).contains(&owner.len())
}

fuzz_target!(|input: (i64, u8, u64, Vec<&[u8]>)| {
    let (max_ttl_ms, max_keys, max_token, words) = input;
    let limits = Limits {
        max_ttl_ms: max_ttl_ms.max(0),
        max_keys: usize::from(max_keys).max(1),
    };
    for word in &words {
        let expected = std::str::from_utf8(word)
            .ok()
            .and_then(|text| text.parse::<i64>().ok())
            .filter(|n| n.to_string().as_bytes() == *word);
        assert_eq!(args::integer(word), expected);
    }
    let ttl_ok = |ttl: i64| limits.max_ttl_ms == 0 || ttl <= limits.max_ttl_ms;
    if let Ok(acquire) = args::acquire(&words, &limits) {
        assert!(owner_ok(acquire.owner) && ttl_ok(acquire.ttl_ms));
        assert!(acquire.wait_ms.is_none_or(|ms| ms >= 0));
        if let Mode::Shared(Some(limit)) = acquire.mode {
            assert!((1..=i32::MAX as u32).contains(&limit));
        }
    }
    if let Ok(campaign) = args::campaign(&words, &limits) {
        assert!(owner_ok(campaign.owner) && ttl_ok(campaign.ttl_ms));
        assert!(
            campaign
                .value
                .is_some_and(|value| value.len() <= MAX_VALUE_LEN)
        );
        assert!(campaign.mode == Mode::Exclusive && !campaign.reentrant);
    }
    for with_value in [false, true] {
        if let Ok(term) = args::term(&words, with_value) {
            assert_eq!(term.value.is_some(), with_value);
            assert!(term.value.is_none_or(|value| value.len() <= MAX_VALUE_LEN));
            assert!(with_value || term.sync.is_none());
        }
    }
    if let Ok(observe) = args::observe(&words) {
        assert!(observe.block_ms.is_none_or(|ms| ms >= 0));
        if let Some(Seen::Leader { epoch, value }) = observe.last {
            assert!(epoch > 0 && value.len() <= MAX_VALUE_LEN);
        }
    }
    if let Ok(held) = args::release(&words) {
        assert!(owner_ok(held.owner));
    }
    if let Ok(held) = args::renew(&words, &limits) {
        assert!(owner_ok(held.owner) && ttl_ok(held.ttl_ms));
    }
    if let Ok(raise) = args::raise(&words, max_token) {
        assert!(owner_ok(raise.owner) && (1..=max_token).contains(&raise.token));
    }
    if let Ok(fence) = args::fence(&words) {
        assert!(fence.owner.is_none_or(|owner| owner_ok(owner)));
    }
    let _ = args::info(&words);
    // A guarded command's check and command, and a fence's raise in the effects.
    for guard in [true, false] {
        let parsed = if guard {
            args::guard(&words)
        } else {
            args::fenced(&words)
        };
        if let Ok(parsed) = parsed {
            assert!(!parsed.command.is_empty());
            assert!(parsed.owner.is_none_or(|owner| owner_ok(owner)));
            assert!(parsed.token.is_none_or(|token| token > 0));
            assert_eq!(
                args::guarded_command_at(&words, guard),
                Some(words.len() - parsed.command.len())
            );
        }
    }
    if let Some((_, token)) = args::apply_fence(&words) {
        assert!(token > 0 && words.len() == 4);
    }
    if let Ok(args::Session::Open {
        grace_ms: Some(grace),
    }) = args::session(&words, u64::from(max_keys) * 1_000)
    {
        assert!(grace >= 100 && grace <= u64::from(max_keys) * 1_000);
    }
    if let Ok(promotable) = args::promotable(&words) {
        assert!(promotable.until_ms > 0 && promotable.timeout_ms > 0);
        assert!(promotable.listed.len() <= args::MAX_LISTED);
        assert!(
            promotable
                .listed
                .iter()
                .all(|id| id.len() <= args::MAX_REPLICA_ID)
        );
    }
    // A replica's word to its master (what any client, even before AUTH, can send).
    if let Ok(said) = args::replconf(&words) {
        assert!(said.port > 0);
        assert!(
            said.ip
                .is_none_or(|ip| !ip.is_empty() && ip.len() <= args::MAX_IP_ADDRESS)
        );
    }
    // A Sentinel's hello (what any client allowed to PUBLISH can send), and the fields of its
    // `SENTINEL MASTER` reply.
    if let Some(hello) = words
        .first()
        .and_then(|payload| deployment::parse_hello(payload))
    {
        assert!(hello.master.contains(':') && deployment::is_run_id(&hello.runid));
        assert!(!hello.master_name.is_empty() && hello.link_id().len() == 8);
    }
    if let Some(said) = deployment::sentinel_master(&words) {
        assert!(said.down_after_ms <= deployment::LARGEST_FAILOVER_MS);
        assert!(said.runid.is_none_or(|runid| deployment::is_run_id(&runid)));
    }
    // A server's `ROLE` reply, as the module reads it.
    if let Ok(texts) = words
        .iter()
        .map(|word| std::str::from_utf8(word))
        .collect::<Result<Vec<_>, _>>()
        && let Some(role) = deployment::role(&texts)
    {
        assert_eq!(role.master, role.master_address.is_none());
    }
    // `INFO replication` as the in-sync set reads it, then the set's rules on what it read;
    // the lease horizon's record as a start reads it from its file.
    let text = words.concat();
    if let Some(record) = horizon::Horizon::decode(&text) {
        assert_eq!(
            horizon::Horizon::decode(record.encode().as_bytes()),
            Some(record)
        );
    }
    if let Ok(info) = std::str::from_utf8(&text) {
        // A master's error reply to a replica's word that it runs the module.
        let _ = insync::checks::replied(Some(info.to_owned()), || Some(info.to_owned()));
        let replication = insync::parse(info);
        let timing = insync::Timing {
            timeout_ms: max_token % 100_000,
            drop_delay_ms: u64::from(max_keys) * 100,
            strict: max_keys % 2 == 0,
            master_down_ms: (max_keys % 3 == 0).then_some(max_token % 1_000_000),
        };
        let mut set = insync::Master::default();
        let answered = |from: u64, to: u64| from <= to;
        set.observe(max_token, &replication, timing, answered);
        let listed = set.list(max_token, timing);
        assert!(listed.len() <= replication.replicas.len());
        let status = set.status(&replication, usize::from(max_keys));
        assert!(status.members <= replication.replicas.len());
    }
    for set in [
        args::macquire(&words, &limits),
        args::mrelease(&words, &limits),
        args::mrenew(&words, &limits),
    ]
    .into_iter()
    .flatten()
    {
        assert!(owner_ok(set.owner) && ttl_ok(set.ttl_ms));
        assert!((1..=limits.max_keys).contains(&set.keys.len()));
        let distinct: HashSet<&[u8]> = set.keys.iter().copied().collect();
        assert_eq!(distinct.len(), set.keys.len());
    }
    for position in args::key_positions(&words) {
        assert!(position < words.len());
    }
});
