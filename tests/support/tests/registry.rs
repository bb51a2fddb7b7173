//! The OCI registry support: a real distribution registry takes a Wasm artifact pushed by the real
//! `oras` CLI and gives back the same bytes in the CNCF Wasm layout; with auth it refuses anonymous
//! and wrong-password requests and serves the right user; with TLS it serves HTTPS only, to clients
//! that trust its own CA; dropping it leaves no process behind.

use mimeo_envtest::{Registry, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, oras};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A few bytes that start like a Wasm module, different per test so no test can pass on another's
/// push; the registry stores opaque blobs, so they need not be a valid module.
fn wasm(seed: u8) -> Vec<u8> {
    let mut bytes = b"\0asm\x01\0\0\0".to_vec();
    bytes.extend((0..=255u8).map(|b| b.wrapping_mul(31).wrapping_add(seed)));
    bytes
}

/// Runs `oras` with `args` in `dir`, with a credentials file of its own in `dir`, so nothing from
/// `~/.docker/config.json` counts.
fn oras_in(dir: &Path, args: &[&str]) -> Output {
    let oras = oras().unwrap_or_else(|e| panic!("{e}"));
    let output = Command::new(oras)
        .args(args)
        .arg("--registry-config")
        .arg(dir.join("oras-auth.json"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("running oras");
    println!(
        "oras {}: {}\n{}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn assert_ok(output: &Output, registry: &Registry) {
    assert!(
        output.status.success(),
        "oras failed: {}\n--- registry log tail ---\n{}",
        String::from_utf8_lossy(&output.stderr),
        registry.log_tail()
    );
}

/// Whether a process with this pid is alive and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses: "pid (comm) S ...".
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

async fn wait_gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

fn manifest(registry: &Registry, reference: &str) -> serde_json::Value {
    let output = registry
        .oras_command(&["manifest", "fetch"])
        .unwrap_or_else(|e| panic!("{e}"))
        .arg(format!("{}/{reference}", registry.host()))
        .output()
        .expect("running oras manifest fetch");
    assert_ok(&output, registry);
    serde_json::from_slice(&output.stdout).expect("the manifest is JSON")
}

/// Checks the CNCF Wasm artifact layout: an OCI image manifest, the Wasm config media type, and
/// one `application/wasm` layer of `len` bytes.
fn assert_wasm_layout(manifest: &serde_json::Value, len: usize) {
    assert_eq!(
        manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json",
        "{manifest:#}"
    );
    assert_eq!(
        manifest["config"]["mediaType"], WASM_CONFIG_MEDIA_TYPE,
        "{manifest:#}"
    );
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest:#}");
    assert_eq!(layers[0]["mediaType"], WASM_LAYER_MEDIA_TYPE, "{manifest:#}");
    assert_eq!(layers[0]["size"], len, "{manifest:#}");
}

#[tokio::test]
async fn oras_pushes_and_pulls_a_wasm_artifact_without_auth() {
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(registry.credentials(), None);
    assert_eq!(registry.url(), format!("http://{}", registry.host()));
    assert_eq!(registry.ca_path(), None);
    assert_eq!(registry.get_status("/v2/", None).await.unwrap(), 200);

    let work = tempfile::tempdir().unwrap();
    let bytes = wasm(1);
    std::fs::write(work.path().join("file.wasm"), &bytes).unwrap();
    std::fs::write(
        work.path().join("config.json"),
        r#"{"architecture":"wasm","os":"wasip2"}"#,
    )
    .unwrap();
    let reference = format!("{}/test/blob:v1", registry.host());
    // `--config FILE:TYPE` gives the config its media type in an image-spec v1.0 manifest, which is
    // the CNCF layout; `--artifact-type` alone would set `artifactType` over an empty config.
    let config = format!("config.json:{WASM_CONFIG_MEDIA_TYPE}");
    let layer = format!("file.wasm:{WASM_LAYER_MEDIA_TYPE}");
    let push = oras_in(
        work.path(),
        &["push", "--plain-http", &reference, "--config", &config, &layer],
    );
    assert_ok(&push, &registry);

    assert_wasm_layout(&manifest(&registry, "test/blob:v1"), bytes.len());

    let out = work.path().join("out");
    let pull = oras_in(
        work.path(),
        &["pull", "--plain-http", "-o", out.to_str().unwrap(), &reference],
    );
    assert_ok(&pull, &registry);
    assert_eq!(std::fs::read(out.join("file.wasm")).unwrap(), bytes);

    // The access log records the requests: what a failing test prints.
    let log = std::fs::read_to_string(registry.log_path()).unwrap();
    assert!(log.contains("PUT /v2/test/blob/manifests/v1"), "{log}");
}

#[tokio::test]
async fn push_wasm_writes_the_cncf_layout() {
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let bytes = wasm(2);
    let digest = registry
        .push_wasm("plugins/echo:1.0.0", &bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest:?}");

    let manifest = manifest(&registry, "plugins/echo:1.0.0");
    assert_wasm_layout(&manifest, bytes.len());
    // By digest too, as a pinned plugin reference would fetch it.
    assert_eq!(
        self::manifest(&registry, &format!("plugins/echo@{digest}")),
        manifest
    );

    let config = registry
        .oras_command(&["blob", "fetch"])
        .unwrap()
        .args(["--output", "-"])
        .arg(format!(
            "{}/plugins/echo@{}",
            registry.host(),
            manifest["config"]["digest"].as_str().unwrap()
        ))
        .output()
        .unwrap();
    assert_ok(&config, &registry);
    let config: serde_json::Value = serde_json::from_slice(&config.stdout).unwrap();
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    assert_eq!(config["layerDigests"][0], manifest["layers"][0]["digest"]);

    let out = tempfile::tempdir().unwrap();
    let pull = registry
        .oras_command(&["pull"])
        .unwrap()
        .arg("-o")
        .arg(out.path())
        .arg(format!("{}/plugins/echo:1.0.0", registry.host()))
        .output()
        .unwrap();
    assert_ok(&pull, &registry);
    assert_eq!(std::fs::read(out.path().join("plugin.wasm")).unwrap(), bytes);
}

#[tokio::test]
async fn a_registry_with_auth_serves_only_its_user() {
    let registry = Registry::start_with_auth("mimeo", "s3cret:with colon")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        registry.credentials(),
        Some(("mimeo".to_owned(), "s3cret:with colon".to_owned()))
    );
    assert_eq!(registry.get_status("/v2/", None).await.unwrap(), 401);
    assert_eq!(
        registry
            .get_status("/v2/", Some(("mimeo", "wrong")))
            .await
            .unwrap(),
        401
    );
    assert_eq!(
        registry
            .get_status("/v2/", Some(("someone", "s3cret:with colon")))
            .await
            .unwrap(),
        401
    );
    assert_eq!(
        registry
            .get_status("/v2/", Some(("mimeo", "s3cret:with colon")))
            .await
            .unwrap(),
        200
    );

    let work = tempfile::tempdir().unwrap();
    let bytes = wasm(3);
    std::fs::write(work.path().join("file.wasm"), &bytes).unwrap();
    let reference = format!("{}/test/blob:v1", registry.host());
    let layer = format!("file.wasm:{WASM_LAYER_MEDIA_TYPE}");
    let push = ["push", "--plain-http", &reference, &layer];

    let anonymous = oras_in(work.path(), &push);
    assert!(!anonymous.status.success(), "an anonymous push was accepted");
    // oras sees the challenge and, having no credential for it, gives up before sending any.
    let stderr = String::from_utf8_lossy(&anonymous.stderr);
    assert!(stderr.contains("basic credential not found"), "{stderr}");

    let wrong = oras_in(
        work.path(),
        &[&push[..], &["-u", "mimeo", "-p", "wrong"]].concat(),
    );
    assert!(
        !wrong.status.success(),
        "a push with a wrong password was accepted"
    );
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("401"), "{stderr}");
    let tag = "/v2/test/blob/manifests/v1";
    let user = Some(("mimeo", "s3cret:with colon"));
    assert_eq!(
        registry.get_status(tag, user).await.unwrap(),
        404,
        "a refused push left a tag"
    );

    let authed = oras_in(
        work.path(),
        &[&push[..], &["-u", "mimeo", "-p", "s3cret:with colon"]].concat(),
    );
    assert_ok(&authed, &registry);
    assert_eq!(registry.get_status(tag, user).await.unwrap(), 200);
    assert_eq!(registry.get_status(tag, None).await.unwrap(), 401);

    // Reads need the credentials too; oras_command supplies them.
    let out = work.path().join("out");
    let pull = ["pull", "--plain-http", "-o", out.to_str().unwrap(), &reference];
    assert!(
        !oras_in(work.path(), &pull).status.success(),
        "an anonymous pull was served"
    );
    let pulled = registry
        .oras_command(&["pull"])
        .unwrap()
        .arg("-o")
        .arg(&out)
        .arg(&reference)
        .output()
        .unwrap();
    assert_ok(&pulled, &registry);
    assert_eq!(std::fs::read(out.join("file.wasm")).unwrap(), bytes);
}

#[tokio::test]
async fn a_tls_registry_serves_only_clients_that_trust_its_ca() {
    let registry = Registry::start_tls().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(registry.url(), format!("https://{}", registry.host()));
    let ca_path = registry.ca_path().expect("a TLS registry has a CA");
    let ca_pem = registry.ca_pem().expect("a TLS registry has a CA");
    assert!(ca_pem.starts_with("-----BEGIN CERTIFICATE-----"), "{ca_pem}");
    assert_eq!(std::fs::read_to_string(ca_path).unwrap(), ca_pem);
    // Over TLS, trusting that CA alone.
    assert_eq!(registry.get_status("/v2/", None).await.unwrap(), 200);

    // oras_command passes --ca-file, so oras checks the certificate and gets through.
    let bytes = wasm(5);
    let digest = registry
        .push_wasm("plugins/tls:v1", &bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    let manifest = manifest(&registry, "plugins/tls:v1");
    assert_wasm_layout(&manifest, bytes.len());
    assert_eq!(
        self::manifest(&registry, &format!("plugins/tls@{digest}")),
        manifest
    );
    assert_eq!(
        registry
            .get_status("/v2/plugins/tls/manifests/v1", None)
            .await
            .unwrap(),
        200
    );

    // Without the CA (and without --plain-http, so over HTTPS) oras refuses the certificate.
    let work = tempfile::tempdir().unwrap();
    let reference = format!("{}/plugins/tls:v1", registry.host());
    let untrusting = oras_in(work.path(), &["manifest", "fetch", &reference]);
    assert!(
        !untrusting.status.success(),
        "oras trusted a certificate from an unknown CA"
    );
    let stderr = String::from_utf8_lossy(&untrusting.stderr);
    assert!(
        stderr.contains("certificate signed by unknown authority"),
        "{stderr}"
    );

    // Each TLS registry has a CA of its own: another registry's CA does not vouch for this one.
    let other = Registry::start_tls().await.unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(other.ca_pem(), registry.ca_pem());
    let other_ca = other.ca_path().unwrap().to_str().unwrap();
    let wrong_ca = oras_in(
        work.path(),
        &["manifest", "fetch", "--ca-file", other_ca, &reference],
    );
    assert!(
        !wrong_ca.status.success(),
        "oras trusted a certificate from another registry's CA"
    );
    let stderr = String::from_utf8_lossy(&wrong_ca.stderr);
    assert!(
        stderr.contains("certificate signed by unknown authority"),
        "{stderr}"
    );

    // The port speaks TLS only: Go's server answers a plain HTTP request with a 400 of its own.
    let mut plain = std::net::TcpStream::connect(registry.host()).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(
        &mut plain,
        format!(
            "GET /v2/ HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            registry.host()
        )
        .as_bytes(),
    )
    .unwrap();
    let mut response = String::new();
    std::io::Read::read_to_string(&mut plain, &mut response).unwrap();
    assert!(response.starts_with("HTTP/1.0 400 Bad Request"), "{response:?}");
    assert!(
        response.contains("Client sent an HTTP request to an HTTPS server"),
        "{response:?}"
    );
}

#[tokio::test]
async fn user_names_that_break_htpasswd_are_refused() {
    for user in ["", "a:b", "a\nb"] {
        let refused = Registry::start_with_auth(user, "x").await;
        assert!(refused.is_err(), "{user:?} was accepted");
    }
}

#[tokio::test]
async fn registries_are_independent_and_reaped_on_drop() {
    let (a, b) = tokio::join!(Registry::start(), Registry::start());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.host(), b.host());
    a.push_wasm("only/in-a:v1", &wasm(4)).unwrap();
    assert_eq!(a.get_status("/v2/only/in-a/tags/list", None).await.unwrap(), 200);
    assert_eq!(b.get_status("/v2/only/in-a/tags/list", None).await.unwrap(), 404);

    let (pid, port, storage) = (a.pid(), a.host(), a.log_path().parent().unwrap().to_owned());
    assert!(alive(pid));
    drop(a);
    assert!(wait_gone(pid).await, "registry {pid} outlived its Registry");
    assert!(!storage.exists(), "{} was left behind", storage.display());
    assert!(
        std::net::TcpStream::connect(&port).is_err(),
        "{port} still accepts connections"
    );
    // The other one is untouched.
    assert_eq!(b.get_status("/v2/", None).await.unwrap(), 200);
}
