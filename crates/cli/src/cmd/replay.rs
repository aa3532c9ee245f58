//! `mantle replay`.

#[derive(clap::Args)]
pub struct Args {
    /// Trace file to replay.
    #[arg(long)]
    pub trace: std::path::PathBuf,
}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
