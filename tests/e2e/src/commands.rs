//! Commands the kind scenarios run (docker, kubectl, helm, the plugin), to their end without
//! blocking the test's runtime.

use tokio::process::Command;

/// Runs a command to its end; its stdout, or a panic naming it with what it wrote.
pub async fn output(command: &mut Command) -> String {
    let out = command.output().await.unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{command:?} failed: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// Runs a program with these arguments to its end; its stdout, or a panic.
pub async fn run(program: &str, args: &[&str]) -> String {
    output(Command::new(program).args(args)).await
}
