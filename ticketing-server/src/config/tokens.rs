//! The client and peer tokens: token files and the `TICKETING_CLIENT_TOKENS` / `TICKETING_PEER_TOKEN` variables.

use super::{invalid, read, ConfigError};
use std::path::Path;
use ticketing_proto::auth::Secret;

/// Reads a token file: one token per line, surrounding whitespace trimmed, blank lines skipped.
fn read_token_lines(path: &Path) -> Result<Vec<Secret>, ConfigError> {
    let text = zeroize::Zeroizing::new(read("token file", path)?);
    Ok(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(Secret::from).collect())
}

/// The client tokens: the lines of `file` (if given), then the
/// comma-separated `TICKETING_CLIENT_TOKENS`, duplicates removed. Read at
/// start and on every reload. A file that holds no token is an error, never
/// "authentication off" (docs/security.md, "Client tokens"): at start the
/// server refuses to run, on a reload it keeps the tokens it has.
pub fn client_tokens(file: Option<&Path>) -> Result<Vec<Secret>, ConfigError> {
    let mut client_tokens = Vec::new();
    if let Some(path) = file {
        let lines = read_token_lines(path)?;
        if lines.is_empty() {
            return Err(invalid(
                "--client-tokens-file",
                format!(
                    "{} holds no token: it would turn client authentication off; put at least one token in it \
                     (or remove the setting to run without authentication)",
                    path.display()
                ),
            ));
        }
        client_tokens.extend(lines);
    }
    if let Some(inline) = env_var("TICKETING_CLIENT_TOKENS")?.map(zeroize::Zeroizing::new) {
        client_tokens.extend(inline.split(',').map(str::trim).filter(|t| !t.is_empty()).map(Secret::from));
    }
    // Duplicates dropped (Secret compares in constant time).
    let mut unique: Vec<Secret> = Vec::with_capacity(client_tokens.len());
    for t in client_tokens {
        if !unique.contains(&t) {
            unique.push(t);
        }
    }
    Ok(unique)
}

/// The peer tokens: the lines of `file` (one, or during a rotation two: the
/// first is sent, every line is accepted), else `TICKETING_PEER_TOKEN`.
/// Read at start and on every reload.
pub fn peer_tokens(file: Option<&Path>) -> Result<Vec<Secret>, ConfigError> {
    match file {
        Some(path) => {
            let lines = read_token_lines(path)?;
            if lines.is_empty() || lines.len() > 2 {
                return Err(invalid(
                    "--peer-token-file",
                    format!("{} must hold one token line (two during a rotation), got {}", path.display(), lines.len()),
                ));
            }
            Ok(lines)
        }
        None => Ok(env_var("TICKETING_PEER_TOKEN")?
            .map(zeroize::Zeroizing::new)
            .map(|t| Secret::from(t.trim()))
            .filter(|t| !t.is_empty())
            .into_iter()
            .collect()),
    }
}

/// The admin tokens: the lines of `file` (several during a rotation, any
/// is accepted). A file that holds no token is an error, never "the admin
/// port open" (docs/security.md, "The admin port").
pub fn admin_tokens(file: Option<&Path>) -> Result<Vec<Secret>, ConfigError> {
    let Some(path) = file else { return Ok(Vec::new()) };
    let lines = read_token_lines(path)?;
    if lines.is_empty() {
        return Err(invalid(
            "--admin-token-file",
            format!("{} holds no token: put at least one token in it", path.display()),
        ));
    }
    Ok(lines)
}

fn env_var(name: &'static str) -> Result<Option<String>, ConfigError> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::NotUnicode(name)),
    }
}
