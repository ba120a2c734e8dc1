//! A local run's output: each replica's lines prefixed with its name (coloured on a terminal),
//! as `docker compose up` shows them, or into one file per replica under `--logs-dir`; the
//! runner's own lines on stderr.

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
                let _held = out.lock.lock().expect("output lock");
                match file.as_mut() {
                    Some(f) => {
                        let _ = writeln!(f, "{line}");
                    }
                    None => {
                        let _ = writeln!(std::io::stdout(), "{prefix} {line}");
                    }
                }
            }
        });
    }

    /// A line of the runner's own, on stderr.
    pub fn status(&self, line: &str) {
        let _held = self.lock.lock().expect("output lock");
        let _ = writeln!(std::io::stderr(), "[di run] {line}");
    }
}
