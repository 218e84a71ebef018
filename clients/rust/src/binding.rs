//! Pooled connections bound to the client's session (`LOCK.SESSION USE`): a connection that
//! uses a session ties what it acquires and renews without a `SESSION` argument to that
//! session, so once a pooled connection is bound, the tied writes sent on it carry no session
//! of their own — the cost of a session is one `USE` per connection.
//!
//! # How a connection is bound
//! Each pooled connection remembers the session it is bound to ([`Bound`]). A round trip whose
//! writes are to be tied to a session the connection is not known to be bound to — a new
//! connection, or the client's session was replaced (it ended, or a failover) — starts with
//! `LOCK.SESSION USE id` in the same pipeline ([`Head`]): binding costs no round trip. The
//! binding is recorded only once `USE` replied `OK`. While its reply is unread it is unknown,
//! and the next round trip on the connection binds it again.
//!
//! # A failed `USE` grants nothing untied
//! The writes behind a `USE` in the same round trip still name their session (`SESSION id`,
//! which wins over the binding). So when the `USE` fails — `ERR no such session`: the session
//! ended, or the server is a new master that never had it — they fail the same way and change
//! nothing, exactly as a write naming an ended session always did: none runs untied on a
//! connection never bound, and none is tied to an older session the connection was bound to.
//! The caller handles that `no such session` as before: a new session is opened, and the
//! acquire is sent again or the holding tied to it by a renewal. Once a connection's binding
//! was confirmed, its writes carry no session; when that session has ended, the server refuses
//! them with `ERR no such session` too (and changes nothing), until the connection is bound
//! again.
//!
//! # Writes tied to no session
//! A write to be tied to none (a holding already reported lost: the client no longer names a
//! session for it) on a connection that is or may be bound is preceded by
//! `LOCK.SESSION USE NONE`, so that it is sent exactly as before bindings (`USE NONE` needs no
//! session, so it cannot fail for want of one; where it fails otherwise — a replica's
//! `READONLY` — the write behind it fails the same way). With sessions off, and in a cluster,
//! no connection is ever bound and no `USE` is sent. The shared connection is never bound
//! either: it reconnects by itself, which would drop a binding unseen, so the tied writes it
//! carries (those not synced, [`crate::Sync::off`]) name their session ([`named`]).

use redis::{Cmd, Pipeline, Value};

/// What a pooled connection is bound to (`LOCK.SESSION USE`), as far as the client knows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Bound {
    /// To no session: a new connection, or one unbound with `USE NONE`.
    #[default]
    Unbound,
    /// To the session of this id.
    To(String),
    /// Not known: the reply to a `USE` sent on it was not read.
    Unknown,
}

impl Bound {
    /// The binding that ties writes to `session` (`None`: to none).
    fn of(session: Option<&str>) -> Self {
        session.map_or(Self::Unbound, |id| Self::To(id.to_owned()))
    }

    /// Whether a write to be tied to `session` is tied to it on a connection bound so.
    fn ties_to(&self, session: Option<&str>) -> bool {
        match (self, session) {
            (Self::Unbound, None) => true,
            (Self::To(bound), Some(id)) => bound == id,
            _ => false,
        }
    }
}

/// A write sent on a pooled connection: the key it is routed by, the command, and the session
/// it is to be tied to (`None`: to none). The command itself names no session.
#[derive(Clone, Copy)]
pub(crate) struct Write<'a> {
    pub(crate) key: &'a str,
    pub(crate) command: &'a Cmd,
    pub(crate) session: Option<&'a str>,
}

/// `command` naming `session` (`SESSION id`), for a connection that is not bound to it; as it
/// is with no session.
pub(crate) fn named(command: &Cmd, session: Option<&str>) -> Cmd {
    let mut command = command.clone();
    if let Some(id) = session {
        command.arg("SESSION").arg(id);
    }
    command
}

/// `LOCK.SESSION USE id`, or `USE NONE` to tie to no session.
fn use_command(session: Option<&str>) -> Cmd {
    let mut command = redis::cmd("LOCK.SESSION");
    command.arg("USE").arg(session.unwrap_or("NONE"));
    command
}

/// The head of a round trip on a pooled connection: its writes, in order, each preceded by
/// `LOCK.SESSION USE` when the connection is not known to be bound to the session it is to be
/// tied to, and naming its session when a `USE` is in flight ahead of it (see the module's
/// docs).
pub(crate) struct Head {
    /// The commands to send, errors replied in place (`ignore_errors`).
    pipeline: Pipeline,
    /// For each command of `pipeline`: the binding its `USE` asks for, or `None` for a write.
    steps: Vec<Option<Bound>>,
    /// The connection's binding before this round trip.
    before: Bound,
}

impl Head {
    /// The head of `writes` on a connection bound as `bound`.
    pub(crate) fn new(bound: &Bound, writes: &[Write<'_>]) -> Self {
        let mut pipeline = redis::pipe();
        pipeline.ignore_errors();
        let mut steps = Vec::with_capacity(writes.len());
        let mut binding = bound.clone();
        let mut unconfirmed = false;
        for write in writes {
            if !binding.ties_to(write.session) {
                binding = Bound::of(write.session);
                pipeline.add_command(use_command(write.session));
                steps.push(Some(binding.clone()));
                unconfirmed = true;
            }
            let command = if unconfirmed {
                named(write.command, write.session)
            } else {
                write.command.clone()
            };
            pipeline.add_command(command);
            steps.push(None);
        }
        Self {
            pipeline,
            steps,
            before: bound.clone(),
        }
    }

    /// The commands to send.
    pub(crate) const fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Whether it binds the connection (it has a `USE`): its binding is [`Bound::Unknown`]
    /// until the replies are read.
    pub(crate) fn binds(&self) -> bool {
        self.steps.iter().any(Option::is_some)
    }

    /// Reads `replies`, one per command sent: returns the writes' replies, in order, and the
    /// connection's binding after them — each `USE` that replied `OK` moved it; one that
    /// failed left it as it was. Unknown when the replies do not match the commands.
    pub(crate) fn read(&self, replies: Vec<Value>) -> (Vec<Value>, Bound) {
        let matched = replies.len() == self.steps.len();
        let mut bound = self.before.clone();
        let mut writes = Vec::with_capacity(replies.len());
        for (step, reply) in self.steps.iter().zip(replies) {
            match step {
                Some(target) if is_ok(&reply) => bound = target.clone(),
                Some(_) => {}
                None => writes.push(reply),
            }
        }
        (writes, if matched { bound } else { Bound::Unknown })
    }
}

/// Whether a reply is the simple string `OK`.
fn is_ok(reply: &Value) -> bool {
    match reply {
        Value::Okay => true,
        Value::SimpleString(text) => text == "OK",
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(key: &str) -> Cmd {
        let mut command = redis::cmd("LOCK.ACQUIRE");
        command.arg(key).arg("owner").arg(1_000);
        command
    }

    /// The commands of `head`, each as its words.
    fn words(head: &Head) -> Vec<String> {
        let word = |arg: redis::Arg<&[u8]>| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => "<other>".to_owned(),
        };
        let command = |command: &Cmd| command.args_iter().map(word).collect::<Vec<_>>().join(" ");
        head.pipeline.cmd_iter().map(command).collect()
    }

    fn write<'a>(key: &'a str, command: &'a Cmd, session: Option<&'a str>) -> Write<'a> {
        Write {
            key,
            command,
            session,
        }
    }

    fn error(text: &str) -> Value {
        let reply = format!("-ERR {text}\r\n");
        redis::parse_redis_value(reply.as_bytes()).expect("an error reply")
    }

    #[test]
    fn a_new_connection_is_bound_in_the_writes_round_trip_and_they_still_name_the_session() {
        let (a, b) = (acquire("a"), acquire("b"));
        let writes = [write("a", &a, Some("s1")), write("b", &b, Some("s1"))];
        let head = Head::new(&Bound::Unbound, &writes);
        assert!(head.binds());
        assert_eq!(
            words(&head),
            [
                "LOCK.SESSION USE s1",
                "LOCK.ACQUIRE a owner 1000 SESSION s1",
                "LOCK.ACQUIRE b owner 1000 SESSION s1",
            ]
        );
        let replies = vec![Value::Okay, Value::Int(1), Value::Int(2)];
        let (writes, bound) = head.read(replies);
        assert_eq!(writes, [Value::Int(1), Value::Int(2)]);
        assert_eq!(bound, Bound::To("s1".to_owned()));
    }

    #[test]
    fn a_bound_connection_sends_the_writes_alone() {
        let a = acquire("a");
        let writes = [write("a", &a, Some("s1"))];
        let head = Head::new(&Bound::To("s1".to_owned()), &writes);
        assert!(!head.binds());
        assert_eq!(words(&head), ["LOCK.ACQUIRE a owner 1000"]);
        let (writes, bound) = head.read(vec![Value::Int(7)]);
        assert_eq!(writes, [Value::Int(7)]);
        assert_eq!(bound, Bound::To("s1".to_owned()));
    }

    #[test]
    fn a_failed_use_leaves_the_binding_as_it_was() {
        let a = acquire("a");
        let writes = [write("a", &a, Some("s2"))];
        let head = Head::new(&Bound::To("s1".to_owned()), &writes);
        assert_eq!(
            words(&head),
            [
                "LOCK.SESSION USE s2",
                "LOCK.ACQUIRE a owner 1000 SESSION s2"
            ]
        );
        let gone = error("no such session");
        let (writes, bound) = head.read(vec![gone.clone(), gone.clone()]);
        assert_eq!(writes, [gone]);
        assert_eq!(bound, Bound::To("s1".to_owned()));
    }

    #[test]
    fn an_untied_write_unbinds_a_connection_that_may_be_bound() {
        let a = acquire("a");
        let untied = [write("a", &a, None)];
        for bound in [Bound::To("s1".to_owned()), Bound::Unknown] {
            let head = Head::new(&bound, &untied);
            assert_eq!(
                words(&head),
                ["LOCK.SESSION USE NONE", "LOCK.ACQUIRE a owner 1000"]
            );
            let (_, after) = head.read(vec![Value::Okay, Value::Int(1)]);
            assert_eq!(after, Bound::Unbound);
        }
        let head = Head::new(&Bound::Unbound, &untied);
        assert!(!head.binds(), "sessions off: no USE");
        assert_eq!(words(&head), ["LOCK.ACQUIRE a owner 1000"]);
    }

    #[test]
    fn writes_of_two_sessions_in_one_round_trip_each_get_theirs() {
        let (a, b) = (acquire("a"), acquire("b"));
        let writes = [write("a", &a, Some("s1")), write("b", &b, Some("s2"))];
        let head = Head::new(&Bound::To("s1".to_owned()), &writes);
        assert_eq!(
            words(&head),
            [
                "LOCK.ACQUIRE a owner 1000",
                "LOCK.SESSION USE s2",
                "LOCK.ACQUIRE b owner 1000 SESSION s2",
            ]
        );
        let (writes, bound) = head.read(vec![Value::Int(1), Value::Okay, Value::Int(2)]);
        assert_eq!(writes, [Value::Int(1), Value::Int(2)]);
        assert_eq!(bound, Bound::To("s2".to_owned()));
        let (_, bound) = head.read(vec![Value::Int(1), Value::Okay]);
        assert_eq!(bound, Bound::Unknown, "a reply missing");
    }
}
