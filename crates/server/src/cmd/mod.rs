//! The commands, one module each. Every command declares itself once, next to its parser
//! and apply: it implements [`Declared`], whose [`CommandSpec`] gives its name, arity, key
//! positions, flags and effects. The one line per command in [`commands!`] below turns those
//! declarations into the [`Command`] enum, the [`COMMANDS`] table, the name lookup and the
//! dispatch; the connection handler and COMMAND read the declarations, never a list of names.
//!
//! Why a trait and a `macro_rules!` table rather than a registry of boxed handlers: dispatch
//! stays a `match` on an enum (no allocation, no virtual call, each command's future inlined),
//! and a wrong declaration (a duplicate or uppercase name) stops the build.

mod accept;
pub mod auth;
mod cache;
mod client;
mod cluster;
mod command;
mod config;
mod counter;
mod dbsize;
mod del;
mod echo;
mod exists;
mod expire;
mod fcall;
mod flush;
mod function;
pub mod function_exec;
mod get;
mod getx;
mod hello;
mod info;
mod keytype;
mod latency;
mod memory;
mod mget;
mod mset;
pub mod multi;
mod number;
mod ping;
pub mod policy;
mod quit;
mod scan;
mod script;
mod select;
mod set;
mod setx;
mod slowlog;
mod string;
mod time;
mod touch;
mod ttl;
mod watch;
mod zlog;

use crate::cluster::{Redirect, RouteGuard};
use crate::db::{Transaction, TxnError};
pub use crate::frame::store_error;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;
pub use command::{CommandSpec, Flags, Keys};
use std::future::Future;

/// What a command is and does: implemented once, in the command's own module.
pub trait Declared<'a>: Sized + Send {
    /// Name, arity, key positions, flags and effects.
    const SPEC: CommandSpec;

    /// Parses the arguments after the name (arity is already checked against [`Self::SPEC`]).
    fn parse(parse: &mut Parse<'a>) -> Result<Self, ParseError>;

    /// Runs the command; the reply.
    fn apply(
        self,
        instance: &Instance,
        session: &mut Session,
    ) -> impl Future<Output = Frame> + Send;

    /// Runs the command inside a transaction (EXEC's queue; see `db::keyspace`): every key it
    /// reads or writes goes through `txn`, which commits them with the rest. A command without
    /// keys runs as usual; one with keys must override this (it would otherwise wait for the
    /// stripe locks its own transaction holds), so the default refuses it.
    fn apply_in(
        self,
        txn: &mut Transaction<'_>,
        instance: &Instance,
        session: &mut Session,
    ) -> impl Future<Output = Frame> + Send {
        let _ = txn;
        async move {
            if Self::SPEC.keys != Keys::NONE {
                return Frame::err(format!(
                    "'{}' cannot run inside a transaction",
                    Self::SPEC.name
                ));
            }
            self.apply(instance, session).await
        }
    }

    /// Whether this request changes stored data: the declaration's `WRITE` flag, unless the
    /// command writes only in some subcommands (CLUSTER IMPORT) and says so here.
    fn writes(&self) -> bool {
        Self::SPEC.writes()
    }

    /// A request that is nothing but one key and value to store (a plain SET): the handler
    /// may batch it with its neighbours in the pipeline instead of applying it.
    fn into_plain_write(self) -> Result<(Bytes, Bytes), Self> {
        Err(self)
    }
}

/// The command table: one line per command, `Variant(module::Type)`, in name order (a test
/// checks). This is the only list of commands.
macro_rules! commands {
    ($($variant:ident($($ty:tt)+)),+ $(,)?) => {
        /// A parsed request; it may borrow its arguments from the request's buffer (`'a`).
        pub enum Command<'a> {
            $($variant($($ty)+)),+
        }

        /// Which variant a row of [`COMMANDS`] parses into.
        #[derive(Clone, Copy)]
        enum Kind {
            $($variant),+
        }

        const KINDS: &[Kind] = &[$(Kind::$variant),+];

        const TABLE: [CommandSpec; KINDS.len()] = [$({
            // `'a` names the lifetime a row's type may borrow with (`get::Get<'a>`).
            #[allow(clippy::extra_unused_lifetimes)]
            const fn spec<'a>() -> CommandSpec {
                <$($ty)+ as Declared<'a>>::SPEC
            }
            spec()
        }),+];

        /// Every command's declaration, in name order.
        pub static COMMANDS: [CommandSpec; KINDS.len()] = TABLE;

        static NAME_INDEX: command::NameIndex<{ KINDS.len() }> = command::name_index(&TABLE);

        impl<'a> Command<'a> {
            fn parse_as(row: usize, parse: &mut Parse<'a>) -> Result<Command<'a>, ParseError> {
                match KINDS[row] {
                    $(Kind::$variant => {
                        <$($ty)+ as Declared<'a>>::parse(parse).map(Command::$variant)
                    })+
                }
            }

            /// This request's row in [`COMMANDS`] (what per-command figures are indexed by).
            pub fn row(&self) -> usize {
                match self {
                    $(Command::$variant(_) => Kind::$variant as usize),+
                }
            }

            /// The declaration of this request's command.
            pub fn spec(&self) -> &'static CommandSpec {
                match self {
                    $(Command::$variant(_) => &COMMANDS[Kind::$variant as usize]),+
                }
            }

            /// Whether this request changes stored data (see [`Declared::writes`]).
            pub fn writes(&self) -> bool {
                match self {
                    $(Command::$variant(cmd) => Declared::writes(cmd)),+
                }
            }

            /// The key and value of a plain SET (see [`Declared::into_plain_write`]).
            pub fn into_plain_write(self) -> Result<(Bytes, Bytes), Command<'a>> {
                match self {
                    $(Command::$variant(cmd) => {
                        Declared::into_plain_write(cmd).map_err(Command::$variant)
                    })+
                }
            }

            async fn run(self, instance: &Instance, session: &mut Session) -> Frame {
                match self {
                    $(Command::$variant(cmd) => Declared::apply(cmd, instance, session).await),+
                }
            }

            /// Runs the command inside `txn` (see [`Declared::apply_in`]); its reply.
            pub async fn run_in(
                self,
                txn: &mut Transaction<'_>,
                instance: &Instance,
                session: &mut Session,
            ) -> Frame {
                let reply = match self {
                    $(Command::$variant(cmd) => {
                        Declared::apply_in(cmd, txn, instance, session).await
                    }),+
                };
                match instance.oversized(&reply, session.protocol) {
                    Some(error) => error,
                    None => reply,
                }
            }
        }
    };
}

commands! {
    Append(string::Append),
    Asking(accept::Asking),
    Auth(auth::Auth),
    Cache(cache::CacheCmd),
    Client(client::Client),
    Cluster(cluster::ClusterCmd),
    Command(command::CommandCmd),
    Config(config::ConfigCmd),
    DbSize(dbsize::DbSize),
    Decr(counter::Decr),
    DecrBy(counter::DecrBy),
    Del(del::Del),
    Discard(multi::Discard),
    Echo(echo::Echo),
    Eval(fcall::Eval<false, false>),
    EvalRo(fcall::Eval<false, true>),
    EvalSha(fcall::Eval<true, false>),
    EvalShaRo(fcall::Eval<true, true>),
    Exec(multi::Exec),
    Exists(exists::Exists),
    Expire(expire::ExpireCmd),
    ExpireAt(expire::ExpireAt),
    ExpireTime(expire::ExpireTime),
    Fcall(fcall::Fcall<false>),
    FcallRo(fcall::Fcall<true>),
    FlushAll(flush::FlushAll),
    FlushDb(flush::FlushDb),
    Function(function::FunctionCmd),
    Get(get::Get<'a>),
    GetDel(getx::GetDel),
    GetEx(getx::GetEx),
    GetRange(string::GetRange),
    GetSet(getx::GetSet),
    Hello(hello::Hello),
    Incr(counter::Incr),
    IncrBy(counter::IncrByCmd),
    IncrByFloat(counter::IncrByFloat),
    Info(info::Info),
    Keys(scan::KeysCmd),
    Latency(latency::LatencyCmd),
    Memory(memory::Memory),
    MGet(mget::MGet),
    MSet(mset::MSet),
    MSetNx(setx::MSetNx),
    Multi(multi::Multi),
    Persist(expire::Persist),
    PExpire(expire::PExpire),
    PExpireAt(expire::PExpireAt),
    PExpireTime(expire::PExpireTime),
    Ping(ping::Ping),
    Policy(policy::PolicyCmd),
    PSetEx(setx::PSetEx),
    Pttl(ttl::Pttl),
    Quit(quit::Quit),
    ReadOnly(accept::ReadOnly),
    ReadWrite(accept::ReadWrite),
    Scan(scan::Scan),
    Script(script::ScriptCmd),
    Select(select::Select),
    Set(set::Set),
    SetEx(setx::SetEx),
    SetNx(setx::SetNx),
    SetRange(string::SetRange),
    Slowlog(slowlog::SlowlogCmd),
    Strlen(string::Strlen),
    Time(time::Time),
    Touch(touch::Touch),
    Ttl(ttl::Ttl),
    Type(keytype::KeyType),
    Unlink(del::Unlink),
    Unwatch(watch::Unwatch),
    Watch(watch::Watch),
    ZlogFill(zlog::Fill),
    ZlogInit(zlog::Init),
    ZlogLease(zlog::LeaseNext),
    ZlogNext(zlog::Next<'a>),
    ZlogOpen(zlog::Open),
    ZlogRead(zlog::Read),
    ZlogReturn(zlog::Return),
    ZlogSeal(zlog::Seal),
    ZlogTail(zlog::Tail),
    ZlogTrim(zlog::Trim),
    ZlogTrimTo(zlog::TrimTo),
    ZlogWrite(zlog::Write),
}

/// The row of SET, which deferred plain writes are recorded under.
pub const SET_ROW: usize = Kind::Set as usize;

// Per-command figures are kept in a fixed array (see `metrics::commands`).
const _: () = assert!(KINDS.len() <= crate::metrics::MAX_COMMANDS);

/// Finds a command's declaration by name, ignoring ASCII case, without allocating.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    command::find(&NAME_INDEX, name).map(|row| &COMMANDS[row])
}

impl<'a> Command<'a> {
    /// Parses `args` (`args[0]` is the name). An error is the reply to send instead.
    pub fn parse(args: &'a [Bytes], session: &Session) -> Result<Command<'a>, Frame> {
        let Some(name) = args.first() else {
            return Err(Frame::err("empty command"));
        };
        let Some(row) = command::find(&NAME_INDEX, name) else {
            return Err(unknown_command(name, &args[1..]));
        };
        let spec = &COMMANDS[row];
        if !session.authenticated && !spec.no_auth() {
            return Err(Frame::Error("NOAUTH Authentication required.".into()));
        }
        if !spec.arity_ok(args.len()) {
            return Err(arity_error(spec.name));
        }
        Command::parse_as(row, &mut Parse::new(args)).map_err(|e| match e {
            ParseError::Arity => arity_error(spec.name),
            other => Frame::err(other),
        })
    }

    /// Parses `args` and, on a cluster node, checks that this node serves the request's keys
    /// (the error is then the redirection); the guard is held while the command runs.
    pub fn parse_routed(
        args: &'a [Bytes],
        session: &Session,
        instance: &Instance,
    ) -> Result<(Command<'a>, Option<RouteGuard>), Redirect> {
        let command = Command::parse(args, session).map_err(Redirect::Reply)?;
        match &instance.cluster {
            None => Ok((command, None)),
            Some(node) => {
                let guard = if zlog::is_sequencer(command.spec()) {
                    node.route_sequencer(&args[1], session.forwarded)?
                } else {
                    node.route(request_keys(command.spec(), args), session.forwarded)?
                };
                Ok((command, guard))
            }
        }
    }

    /// Runs the command and returns its reply, or an error instead of a reply larger than
    /// `--client-output-limit`. A write marks the session: its reply waits for the commit.
    pub async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        session.uncommitted |= self.writes();
        let mut reply = self.run(instance, session).await;
        if let Some(error) = instance.oversized(&reply, session.protocol) {
            reply = error;
        }
        reply
    }
}

/// Commands that declare their keys by count (`numkeys`), not by position.
const KEYS_BY_COUNT: &[&str] = &[
    "eval",
    "eval_ro",
    "evalsha",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// Whether `spec` is a function or script call (its keys are declared by count).
pub fn calls_function(spec: &CommandSpec) -> bool {
    KEYS_BY_COUNT.contains(&spec.name)
}

/// Every key a request declares: by position, or by count for functions and scripts. What a
/// cluster routes on and what EXEC locks.
pub fn request_keys<'k>(spec: &CommandSpec, args: &'k [Bytes]) -> impl Iterator<Item = &'k Bytes> {
    let counted: &[Bytes] = if calls_function(spec) {
        fcall::declared_keys(args)
    } else {
        &[]
    };
    spec.key_args(args).chain(counted)
}

/// Runs a keyed command on a transaction of its own over `keys` and commits it: the way every
/// read-modify-write command applies outside EXEC (its `apply_in` is the command). A macro,
/// not a generic function: the compiler cannot yet prove a generic caller's future `Send`
/// (rust-lang/rust#100013).
macro_rules! atomically {
    ($command:expr, $keys:expr, $instance:expr, $session:expr) => {{
        let instance: &$crate::instance::Instance = $instance;
        let mut txn = instance.db.transaction($keys).await;
        let reply = $crate::cmd::Declared::apply_in($command, &mut txn, instance, $session).await;
        $crate::cmd::committed(txn, reply).await
    }};
}
use atomically;

/// `reply`, once `txn` committed; the store's error if it could not.
async fn committed(txn: Transaction<'_>, reply: Frame) -> Frame {
    match txn.commit().await {
        Ok(()) => reply,
        Err(e) => store_error(e),
    }
}

/// The reply for a transaction's failed operation.
fn txn_error(error: TxnError) -> Frame {
    match error {
        TxnError::Store(e) => store_error(e),
        undeclared => Frame::err(undeclared),
    }
}

/// A `... HELP` reply: one status line per line of text.
pub fn help_reply(lines: &[&'static str]) -> Frame {
    Frame::Array(lines.iter().map(|line| Frame::simple(line)).collect())
}

pub fn arity_error(name: &str) -> Frame {
    Frame::err(format!("wrong number of arguments for '{name}' command"))
}

/// Redis's wording, quoting the first arguments so a user sees what was sent.
fn unknown_command(name: &[u8], args: &[Bytes]) -> Frame {
    let mut message = format!(
        "unknown command '{}', with args beginning with: ",
        printable(name, 128)
    );
    for arg in args.iter().take(8) {
        message.push_str(&format!("'{}' ", printable(arg, 128)));
    }
    Frame::err(message)
}

/// Client-supplied bytes made safe and short for an error line.
pub fn printable(bytes: &[u8], limit: usize) -> String {
    let text: String = String::from_utf8_lossy(&bytes[..bytes.len().min(limit)])
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::from(w.to_string())).collect()
    }

    fn error_of(words: &[&str], session: &Session) -> String {
        match Command::parse(&args(words), session) {
            Err(Frame::Error(message)) => message,
            Err(other) => panic!("unexpected frame {other:?}"),
            Ok(_) => panic!("{words:?} parsed"),
        }
    }

    #[test]
    fn errors_use_redis_wording() {
        let session = Session::new(1, false, None);
        assert_eq!(
            error_of(&["FLUSHX", "x"], &session),
            "ERR unknown command 'FLUSHX', with args beginning with: 'x' "
        );
        assert_eq!(
            error_of(&["get"], &session),
            "ERR wrong number of arguments for 'get' command"
        );
        assert_eq!(
            error_of(&["SET", "k", "v", "EX", "ten"], &session),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            error_of(&["SET", "k", "v", "NX", "XX"], &session),
            "ERR syntax error"
        );
    }

    #[test]
    fn unauthenticated_sessions_may_only_authenticate() {
        let session = Session::new(1, true, None);
        assert_eq!(
            error_of(&["GET", "k"], &session),
            "NOAUTH Authentication required."
        );
        assert!(Command::parse(&args(&["AUTH", "pw"]), &session).is_ok());
        assert!(Command::parse(&args(&["HELLO", "3", "AUTH", "default", "pw"]), &session).is_ok());
        assert!(Command::parse(&args(&["QUIT"]), &session).is_ok());
    }

    #[test]
    fn every_row_parses_into_its_own_variant() {
        let session = Session::new(1, false, None);
        for spec in COMMANDS.iter() {
            let mut words = vec![spec.name];
            words.resize(spec.arity.unsigned_abs() as usize, "1");
            if let Ok(command) = Command::parse(&args(&words), &session) {
                assert_eq!(command.spec().name, spec.name);
            }
        }
    }

    #[test]
    fn names_are_case_insensitive() {
        let session = Session::new(1, false, None);
        assert!(matches!(
            Command::parse(&args(&["gEt", "k"]), &session),
            Ok(Command::Get(_))
        ));
    }

    /// One request per command, to run them all.
    fn sample(name: &str) -> &'static [&'static str] {
        match name {
            "auth" => &["pw"],
            "cache" => &["stats"],
            "client" => &["id"],
            "cluster" => &["keyslot", "k"],
            "command" => &["count"],
            "config" => &["get", "maxmemory"],
            "del" | "exists" | "get" | "pttl" | "ttl" | "touch" | "type" | "unlink" => &["k"],
            "keys" => &["*"],
            "latency" => &["latest"],
            "memory" => &["usage", "k"],
            "scan" => &["0"],
            "slowlog" => &["len"],
            "echo" => &["x"],
            "eval" | "eval_ro" => &["return redis.call('get', KEYS[1])", "1", "k"],
            "evalsha" | "evalsha_ro" => &["0000000000000000000000000000000000000000", "0"],
            "fcall" | "fcall_ro" => &["nosuchfunction", "1", "k"],
            "function" => &["list"],
            "script" => &["exists", "0000000000000000000000000000000000000000"],
            "hello" => &["2"],
            "mget" => &["k", "j"],
            "mset" => &["k", "1", "j", "2"],
            "policy" => &["status"],
            "select" => &["0"],
            "set" => &["k", "v2"],
            "asking" | "dbsize" | "flushall" | "flushdb" | "info" | "ping" | "quit"
            | "readonly" | "readwrite" | "time" => &[],
            "append" => &["k", "x"],
            "decr" | "incr" => &["n"],
            "decrby" | "incrby" => &["n", "2"],
            "incrbyfloat" => &["f", "1.5"],
            "discard" | "exec" | "multi" | "unwatch" => &[],
            "expire" => &["k", "10"],
            "pexpire" => &["k", "10000"],
            "expireat" => &["k", "9999999999"],
            "pexpireat" => &["k", "9999999999000"],
            "expiretime" | "getdel" | "persist" | "pexpiretime" | "strlen" | "watch" => &["k"],
            "getex" => &["k", "ex", "10"],
            "getrange" => &["k", "0", "-1"],
            "getset" => &["k", "v3"],
            "msetnx" => &["m1", "1", "m2", "2"],
            "psetex" => &["k", "10000", "v"],
            "setex" => &["k", "10", "v"],
            "setnx" => &["nx", "v"],
            "setrange" => &["k", "1", "x"],
            // In name order: after ZLOG.SEAL's epoch 2, the writes carry a newer one.
            "zlog.fill" | "zlog.read" => &["obj", "1", "3"],
            "zlog.trim" | "zlog.trimto" => &["obj", "3", "3"],
            "zlog.write" => &["obj", "3", "4", "entry"],
            "zlog.seal" => &["obj", "2"],
            "zlog.init" => &["log", "1", "0"],
            "zlog.next" | "zlog.lease" | "zlog.open" | "zlog.tail" => &["log"],
            "zlog.return" => &["log", "1", "0", "1"],
            other => panic!("no sample request for '{other}': add one here"),
        }
    }

    /// The declaration is what gates a reply on the commit: a command that leaves writes in
    /// the store not yet durable must be declared a write (or the handler would acknowledge
    /// it before it is durable), and one declared a write must have marked the session.
    #[test]
    fn every_command_that_writes_is_declared_a_write() {
        use store::Storage;
        let dir = tempfile::tempdir().unwrap();
        let mut config = crate::Config::new(crate::Backend::RocksDb {
            data_dir: dir.path().to_path_buf(),
            fsync: crate::Fsync::EverySec,
        });
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.enable_flush = true;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let server = crate::Server::bind(config).await.unwrap();
            let instance = server.instance();
            let mut writers = Vec::new();
            for spec in COMMANDS.iter() {
                // The key exists before each command, so a delete has something to delete.
                instance
                    .db
                    .set(
                        &Bytes::from_static(b"k"),
                        &Bytes::from_static(b"v"),
                        0,
                        store::Condition::Always,
                        None,
                    )
                    .await
                    .unwrap();
                instance.db.commit().await.unwrap();
                assert!(!instance.db.store().has_undurable_writes());
                let mut words = vec![spec.name];
                words.extend_from_slice(sample(spec.name));
                let request = args(&words);
                let mut session = Session::new(1, false, None);
                let command = match Command::parse(&request, &session) {
                    Ok(command) => command,
                    Err(reply) => panic!("{words:?}: {reply:?}"),
                };
                command.apply(instance, &mut session).await;
                let wrote = instance.db.store().has_undurable_writes();
                assert!(
                    session.uncommitted || !wrote,
                    "{} wrote to the store but is not declared a write: its reply would be \
                     sent before the write is durable",
                    spec.name
                );
                assert_eq!(session.uncommitted, spec.writes(), "{}", spec.name);
                if wrote {
                    writers.push(spec.name);
                }
                instance.db.commit().await.unwrap();
            }
            // The check above has teeth: these commands really wrote.
            // (FLUSH makes its deletion durable itself: nothing is left undurable.)
            assert_eq!(
                writers,
                [
                    "append",
                    "decr",
                    "decrby",
                    "del",
                    "expire",
                    "expireat",
                    "getdel",
                    "getex",
                    "getset",
                    "incr",
                    "incrby",
                    "incrbyfloat",
                    "mset",
                    "msetnx",
                    "pexpire",
                    "pexpireat",
                    "psetex",
                    "set",
                    "setex",
                    "setnx",
                    "setrange",
                    "unlink",
                    "zlog.fill",
                    "zlog.seal",
                    "zlog.trim",
                    "zlog.trimto",
                    "zlog.write"
                ]
            );
        });
    }
}
