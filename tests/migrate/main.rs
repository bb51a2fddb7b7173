//! `mimeo migrate`: rules written from the peers' annotations, resources and HelmDeployers, and the
//! cut-over that leaves no copy lost.

#[path = "../harness/mod.rs"]
mod harness;

mod cutover;
mod helmdeployer;
mod resource_replicator;
mod rules;

/// `mimeo migrate ARGS` with the plane's kubeconfig: (exit code, stdout, stderr).
fn mimeo_migrate(h: &harness::Harness, args: &[&str]) -> (i32, String, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .arg("migrate")
        .args(args)
        .env("KUBECONFIG", h.plane.kubeconfig_path())
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
