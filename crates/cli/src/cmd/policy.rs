//! `mantle policy check|test|push`: let policy authors compile, lint and unit-test a policy
//! without a trace or a server, and operators push one to a running server. The work is done
//! by `policy::check`, `policy::testenv` and `server::admin`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Subcommand;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: PolicyCommand,
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Compile a policy, list its callbacks and report sandbox violations (exit 1 on errors).
    Check {
        /// The policy file.
        file: PathBuf,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Run one tick on metrics from a JSON environment and print the decision as JSON.
    Test {
        /// The policy file.
        file: PathBuf,
        /// JSON environment: whoami, now, tick, servers, params, timeseries (all optional).
        #[arg(long, value_name = "ENV.json")]
        env: Option<PathBuf>,
        /// Policy parameter, overriding the environment's `params` (repeatable).
        #[arg(long = "param", value_name = "K=V")]
        params: Vec<String>,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Store a policy as the next version in a running server's registry and activate it.
    Push {
        /// The policy file; its name (without .lua) is the policy's name unless --name is given.
        file: PathBuf,
        /// The server, HOST:PORT.
        #[arg(long, value_name = "ADDR")]
        server: String,
        /// Policy name in the registry.
        #[arg(long)]
        name: Option<String>,
        /// Author recorded with the version (default: $USER).
        #[arg(long)]
        author: Option<String>,
    },
}

#[derive(clap::Args)]
struct LimitArgs {
    /// Instruction budget of each callback.
    #[arg(long, value_name = "N")]
    max_instructions: Option<u64>,
    /// Memory limit of the policy, in bytes.
    #[arg(long, value_name = "BYTES")]
    max_memory: Option<usize>,
}

impl LimitArgs {
    fn limits(&self) -> policy::Limits {
        let mut limits = policy::Limits::default();
        if let Some(n) = self.max_instructions {
            limits.instructions = n;
        }
        if let Some(m) = self.max_memory {
            limits.memory_bytes = m;
        }
        limits
    }
}

fn read(path: &Path) -> Result<String> {
    policy::read_policy_file(path).map_err(anyhow::Error::msg)
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        PolicyCommand::Push {
            file,
            server,
            name,
            author,
        } => {
            let source = read(&file)?;
            let name = name.unwrap_or_else(|| {
                file.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
            let author = author
                .or_else(|| std::env::var("USER").ok())
                .unwrap_or_else(|| "mantle policy push".to_string());
            let version = server::admin::push_policy(&server, &name, &source, &author)
                .with_context(|| format!("{}: push failed", file.display()))?;
            writeln!(std::io::stdout(), "{name}@{version} active on {server}")?;
            Ok(())
        }
        PolicyCommand::Check { file, limits } => {
            let report = policy::check::check_source(
                &file.display().to_string(),
                &read(&file)?,
                &limits.limits(),
            );
            if report.ok() {
                write!(std::io::stdout(), "{report}")?;
                return Ok(());
            }
            let _ = write!(std::io::stderr(), "{report}");
            bail!(
                "{}: {} problem(s) found",
                file.display(),
                report.problems.len()
            )
        }
        PolicyCommand::Test {
            file,
            env,
            params,
            limits,
        } => {
            let env = match &env {
                Some(path) => {
                    policy::testenv::TestEnv::from_json(&path.display().to_string(), &read(path)?)
                        .map_err(anyhow::Error::msg)?
                }
                None => policy::testenv::TestEnv::default(),
            };
            let params = params
                .iter()
                .map(|p| policy::parse_param(p))
                .collect::<Result<Vec<_>, _>>()
                .map_err(anyhow::Error::msg)?;
            let report = policy::testenv::run_test(
                &file.display().to_string(),
                &read(&file)?,
                env,
                &params,
                &limits.limits(),
            )
            .map_err(anyhow::Error::msg)?;
            writeln!(
                std::io::stdout(),
                "{}",
                serde_json::to_string_pretty(&report)?
            )?;
            match report.error {
                Some(error) => bail!("{error}"),
                None => Ok(()),
            }
        }
    }
}
