//! `iohr-controller ca rotate|finish`: the CA's rotation with an overlap, in the two
//! steps of `iohr_certs::rotation`. Each takes effect when `serve` restarts.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use iohr_certs::ControllerPki;
use iohr_certs::rotation;

#[derive(Subcommand)]
pub enum CaCommand {
    /// Begin a rotation: a new CA signs agent certificates from now on, and both CAs are
    /// trusted. Restart serve; every agent gets both CAs with its next renewal.
    Rotate {
        #[arg(long, env = "IOHR_DATA_DIR")]
        data_dir: PathBuf,
    },
    /// Finish it, once every agent has renewed (one agent certificate lifetime): the
    /// server's certificate is the new CA's and the old CA is trusted no more. Restart
    /// serve.
    Finish {
        #[arg(long, env = "IOHR_DATA_DIR")]
        data_dir: PathBuf,
    },
}

pub fn run(command: CaCommand) -> anyhow::Result<()> {
    match command {
        CaCommand::Rotate { data_dir } => {
            let pki = ControllerPki::in_data_dir(&data_dir);
            rotation::begin(&pki).context("beginning the CA rotation")?;
            println!(
                "CA rotation begun: {} holds the new CA, then the old; restart serve",
                pki.ca_cert().display()
            );
            println!(
                "new CA sha256:{}",
                iohr_certs::fingerprint_pem_file(&pki.ca_cert())?
            );
        }
        CaCommand::Finish { data_dir } => {
            let pki = ControllerPki::in_data_dir(&data_dir);
            rotation::finish(&pki).context("finishing the CA rotation")?;
            println!(
                "CA rotation finished: the server certificate is the new CA's, the old CA is no longer trusted; restart serve"
            );
        }
    }
    Ok(())
}
