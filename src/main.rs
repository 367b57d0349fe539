use anyhow::Context;
use clap::{Parser, Subcommand};

/// capms: Cluster API infrastructure provider for metal-stack.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print every CustomResourceDefinition capms serves, as YAML.
    Crds {
        /// Write one file per CRD into this directory instead of printing them.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds { dir } => {
            let files = capms::api::crd_files().context("rendering the CRDs as YAML")?;
            match dir {
                Some(dir) => {
                    for (name, yaml) in files {
                        let path = dir.join(name);
                        std::fs::write(&path, yaml)
                            .with_context(|| format!("writing {}", path.display()))?;
                    }
                }
                None => files.iter().for_each(|(_, yaml)| print!("{yaml}")),
            }
        }
    }
    Ok(())
}
