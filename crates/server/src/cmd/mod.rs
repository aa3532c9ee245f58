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
mod dbsize;
mod del;
mod echo;
mod exists;
mod fcall;
mod function;
pub mod function_exec;
mod get;
mod hello;
mod info;
mod mget;
mod mset;
mod ping;
pub mod policy;
mod quit;
mod script;
mod select;
mod set;
mod ttl;

use crate::cluster::{Redirect, RouteGuard};
pub use crate::frame::store_error;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;
pub use command::{CommandSpec, Flags, Keys};
use std::future::Future;

/// What a command is and does: implemented once, in the command's own module.
pub trait Declared<'a>: Sized {
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

        static NAME_INDEX: [(u128, u8); KINDS.len()] = command::name_index(&TABLE);

        impl<'a> Command<'a> {
            fn parse_as(row: usize, parse: &mut Parse<'a>) -> Result<Command<'a>, ParseError> {
                match KINDS[row] {
                    $(Kind::$variant => {
                        <$($ty)+ as Declared<'a>>::parse(parse).map(Command::$variant)
                    })+
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
        }
    };
}

commands! {
    Asking(accept::Asking),
    Auth(auth::Auth),
    Cache(cache::CacheCmd),
    Client(client::Client),
    Cluster(cluster::ClusterCmd),
    Command(command::CommandCmd),
    Config(config::ConfigCmd),
    DbSize(dbsize::DbSize),
    Del(del::Del),
    Echo(echo::Echo),
    Eval(fcall::Eval<false, false>),
    EvalRo(fcall::Eval<false, true>),
    EvalSha(fcall::Eval<true, false>),
    EvalShaRo(fcall::Eval<true, true>),
    Exists(exists::Exists),
    Fcall(fcall::Fcall<false>),
    FcallRo(fcall::Fcall<true>),
    Function(function::FunctionCmd),
    Get(get::Get<'a>),
    Hello(hello::Hello),
    Info(info::Info),
    MGet(mget::MGet),
    MSet(mset::MSet),
    Ping(ping::Ping),
    Policy(policy::PolicyCmd),
    Pttl(ttl::Pttl),
    Quit(quit::Quit),
    ReadOnly(accept::ReadOnly),
    ReadWrite(accept::ReadWrite),
    Script(script::ScriptCmd),
    Select(select::Select),
    Set(set::Set),
    Ttl(ttl::Ttl),
}

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
                // Functions and scripts declare their keys by count, not by position.
                let guard = match command {
                    Command::Fcall(_)
                    | Command::FcallRo(_)
                    | Command::Eval(_)
                    | Command::EvalRo(_)
                    | Command::EvalSha(_)
                    | Command::EvalShaRo(_) => {
                        node.route(fcall::declared_keys(args).iter(), session.forwarded)?
                    }
                    _ => node.route(command.spec().key_args(args), session.forwarded)?,
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
            error_of(&["FLUSHALL", "x"], &session),
            "ERR unknown command 'FLUSHALL', with args beginning with: 'x' "
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
            "del" | "exists" | "get" | "pttl" | "ttl" => &["k"],
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
            "asking" | "dbsize" | "info" | "ping" | "quit" | "readonly" | "readwrite" => &[],
            other => panic!("no sample request for '{other}': add one here"),
        }
    }

    /// The declaration is what gates a reply on the commit: a command that leaves writes in
    /// the store not yet durable must be declared a write (or the handler would acknowledge
    /// it before it is durable), and one declared a write must have marked the session.
    #[test]
    fn every_command_that_writes_is_declared_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = crate::Config::new(crate::Backend::RocksDb {
            data_dir: dir.path().to_path_buf(),
            fsync: crate::Fsync::EverySec,
        });
        config.listen = "127.0.0.1:0".parse().unwrap();
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
                        crate::store::Condition::Always,
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
            assert_eq!(writers, ["del", "mset", "set"]);
        });
    }
}
