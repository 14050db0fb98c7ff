//! `ticketing-server`: parse the configuration, bind, serve until SIGTERM or
//! SIGINT, shut down gracefully and exit 0. Configuration errors exit 2.
//! SIGHUP re-reads the tokens and certificates (docs/security.md, "Rotation").
//! `ticketing-server gen-certs` writes test certificates instead.

#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;
use ticketing_server::config::{Config, ConfigError};
use ticketing_server::durable::DataDirError;
use ticketing_server::server;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|a| a == "gen-certs") {
        return gen_certs();
    }
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ticketing-server: {e}");
            return ExitCode::from(2);
        }
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: logs redirected to a file stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();

    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = config.worker_threads {
        builder.worker_threads(n);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ticketing-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Durable mode's DIR first: a refused one exits before the ready line.
    let data = match ticketing_server::durable::open_for(&config) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("ticketing-server: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let result = runtime.block_on(async move {
        // Signal handlers first, so a SIGTERM right after the ready line is handled.
        let shutdown = shutdown_signal()?;
        let reload = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| anyhow::anyhow!("cannot handle SIGHUP: {e}"))?;
        let listener = TcpListener::bind(&config.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
        let local = listener.local_addr()?;
        // One line on stdout when ready (scripts and tests wait for it).
        println!("ticketing-server listening on {local}");
        let _ = std::io::stdout().flush();
        server::Builder::new(config).reload(reload).data(data).run(listener, shutdown).await
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ticketing-server: {e:#}");
            // Configuration found wrong only at start-up (TLS files, a bad data dir) exits 2 too.
            if let Some(d) = e.chain().find_map(|c| c.downcast_ref::<DataDirError>()) {
                ExitCode::from(d.exit_code())
            } else if e.chain().any(|c| c.is::<ConfigError>()) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// `ticketing-server gen-certs …`: writes test certificates; usage errors exit 2.
fn gen_certs() -> ExitCode {
    use clap::Parser;
    let args = ticketing_server::gencerts::GenCerts::parse_from(std::env::args_os().skip(1));
    match ticketing_server::gencerts::run(&args) {
        Ok(files) => {
            for f in files {
                println!("wrote {}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ticketing-server gen-certs: {e}");
            ExitCode::from(2)
        }
    }
}

/// Installs the SIGTERM and SIGINT handlers now; the future completes on either.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| anyhow::anyhow!("cannot handle SIGTERM: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| anyhow::anyhow!("cannot handle SIGINT: {e}"))?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM"),
            _ = int.recv() => tracing::info!("SIGINT"),
        }
    })
}
