//! Logging setup.

/// Structured logs on stderr; `RUST_LOG` filters, `CAPMS_LOG_FORMAT=json` switches to JSON.
/// Colours only on a terminal: a pod's log (and a file) gets plain text.
pub fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = if std::env::var("CAPMS_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
