//! The processes a test starts: each dies with its test, and a capms has its log scanned for
//! secrets when it ends.

use crate::secrets;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A child process that dies with its test: killed when the guard drops, and (through
/// PR_SET_PDEATHSIG, via `setpriv`) when the thread that started it ends.
pub struct ChildProcess {
    pub name: String,
    child: Child,
    pub log: PathBuf,
    /// A capms: its log is scanned for secrets when it ends ([`secrets`]).
    scanned: bool,
}

impl ChildProcess {
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log_dir: &Path,
    ) -> Self {
        let log = log_dir.join(format!("{name}.log"));
        let log_file = std::fs::File::create(&log).expect("log file");
        let scanned = program.file_name().is_some_and(|f| f == "capms");
        if scanned {
            secrets::given(args, env);
        }
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL", "--"])
            .arg(program)
            .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log fd"))
            .stderr(log_file);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        ChildProcess {
            name: name.to_owned(),
            child,
            log,
            scanned,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Everything the process wrote to stdout and stderr.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<_> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A test already failing says why itself.
        if self.scanned
            && !std::thread::panicking()
            && let Some(line) = secrets::leak(&self.log_text())
        {
            panic!("a secret in the log of {}: {line}", self.name);
        }
    }
}
