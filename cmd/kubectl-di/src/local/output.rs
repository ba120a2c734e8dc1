//! A local run's output: each replica's lines prefixed with its name (coloured on a terminal),
//! as `docker compose up` shows them, or into one file per replica under `--logs-dir`; the
//! runner's own lines on stderr, and, when stderr is a terminal, a status line kept below them.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// Where a run's lines go.
#[derive(Clone)]
pub struct Output {
    colour: bool,
    width: usize,
    logs_dir: Option<PathBuf>,
    /// One writer at a time, so lines of two replicas never interleave mid-line.
    lock: Arc<Mutex<()>>,
    palette: Arc<Mutex<Vec<String>>>,
    /// The status line, redrawn under every line written; `None` off a terminal.
    summary: Option<Arc<Mutex<String>>>,
}

const COLOURS: [u8; 6] = [36, 33, 32, 35, 34, 31];

impl Output {
    /// `names`: every replica, to align the prefixes.
    pub fn new(names: &[String], logs_dir: Option<PathBuf>) -> anyhow::Result<Output> {
        if let Some(dir) = &logs_dir {
            std::fs::create_dir_all(dir)?;
        }
        Ok(Output {
            colour: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
            width: names.iter().map(String::len).max().unwrap_or(0),
            logs_dir,
            lock: Arc::default(),
            palette: Arc::new(Mutex::new(names.to_vec())),
            summary: (std::io::stderr().is_terminal() && std::env::var("TERM").is_ok_and(|t| t != "dumb"))
                .then(Arc::default),
        })
    }

    /// The prefix of `name`'s lines: padded, and coloured by its place in the job.
    fn prefix(&self, name: &str) -> String {
        let padded = format!("{name:<w$} |", w = self.width);
        if !self.colour {
            return padded;
        }
        let names = self.palette.lock().expect("palette lock");
        let colour = COLOURS[names.iter().position(|n| n == name).unwrap_or(0) % COLOURS.len()];
        format!("\x1b[{colour}m{padded}\x1b[0m")
    }

    /// Copies a process's stdout and stderr, line by line, until they close.
    pub fn attach(
        &self,
        name: &str,
        stdout: Option<impl AsyncRead + Unpin + Send + 'static>,
        stderr: Option<impl AsyncRead + Unpin + Send + 'static>,
    ) {
        if let Some(stream) = stdout {
            self.copy(name, stream);
        }
        if let Some(stream) = stderr {
            self.copy(name, stream);
        }
    }

    fn copy(&self, name: &str, stream: impl AsyncRead + Unpin + Send + 'static) {
        let (out, name) = (self.clone(), name.to_owned());
        tokio::spawn(async move {
            let mut file = out.logs_dir.as_ref().and_then(|dir| {
                std::fs::OpenOptions::new().create(true).append(true).open(dir.join(format!("{name}.log"))).ok()
            });
            let prefix = out.prefix(&name);
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match file.as_mut() {
                    Some(f) => {
                        let _ = writeln!(f, "{line}");
                    }
                    None => out.above_summary(|| {
                        let _ = writeln!(std::io::stdout(), "{prefix} {line}");
                    }),
                }
            }
        });
    }

    /// A line of the runner's own, on stderr.
    pub fn status(&self, line: &str) {
        self.above_summary(|| {
            let _ = writeln!(std::io::stderr(), "[di run] {line}");
        });
    }

    /// Replaces the status line (empty: none, as at the end of the run).
    pub fn summary(&self, line: &str) {
        if let Some(summary) = &self.summary {
            let _held = self.lock.lock().expect("output lock");
            *summary.lock().expect("summary lock") = line.to_owned();
            draw(line);
        }
    }

    /// Writes with the status line cleared, then draws it again below what was written. One
    /// writer at a time, so lines of two replicas never interleave mid-line.
    fn above_summary(&self, write: impl FnOnce()) {
        let _held = self.lock.lock().expect("output lock");
        let Some(summary) = &self.summary else {
            return write();
        };
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
        let _ = std::io::stderr().flush();
        write();
        let _ = std::io::stdout().flush();
        draw(&summary.lock().expect("summary lock"));
    }
}

/// The status line at the start of the terminal's last line, without a newline.
fn draw(line: &str) {
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "\r\x1b[2K");
    if !line.is_empty() {
        let _ = write!(stderr, "\x1b[7m {line} \x1b[0m");
    }
    let _ = stderr.flush();
}
