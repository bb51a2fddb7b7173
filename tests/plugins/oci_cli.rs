//! Plugins as OCI artifacts, against a real registry (the CNCF distribution registry) and a real
//! oras: `mimeo plugin push` / `pull` / `inspect` / `test` with `oci://` references, interop with
//! oras in both directions, basic auth, and the library's cache, digest and size guarantees.

use crate::harness;

use mimeo::plugin::oci::{Credentials, Oci, OciError, OciReference, OciSettings};
use mimeo_envtest::{Answer, Asked, Registry, Scripted};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

const USER: &str = "alice";
const PASSWORD: &str = "pw-7f3a-never-shown";

fn filter_keys() -> PathBuf {
    harness::plugin_dir().join("filter-keys.wasm")
}

fn fixture(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("plugins/filter-keys/fixtures")
        .join(case)
}

async fn registry() -> Registry {
    Registry::start().await.unwrap_or_else(|e| panic!("{e}"))
}

/// `mimeo` with nothing of the user's environment that could change which credentials or caches
/// are used: an empty Docker config directory and an artifact cache of its own.
struct Cli {
    home: tempfile::TempDir,
}

impl Cli {
    fn new() -> Self {
        Cli {
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mimeo"));
        command
            .args(args)
            .env("DOCKER_CONFIG", self.home.path().join("docker"))
            .env("MIMEO_ARTIFACT_CACHE_DIR", self.home.path().join("artifacts"))
            .env_remove("MIMEO_REGISTRY_USERNAME")
            .env_remove("MIMEO_REGISTRY_PASSWORD");
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn succeeded(output: &Output) -> String {
    let (stdout, stderr) = text(output);
    assert!(
        output.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        output.status
    );
    stdout
}

/// The value of a `key: value` line of the CLI's output.
fn field(stdout: &str, key: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key}: in\n{stdout}"))
        .trim()
        .to_owned()
}

/// Runs `oras <subcommand> --plain-http … <args>` against the registry in `dir`; returns stdout.
fn oras(registry: &Registry, subcommand: &[&str], args: &[&str], dir: &Path) -> String {
    let output = registry
        .oras_command(subcommand)
        .unwrap_or_else(|e| panic!("{e}"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(
        output.status.success(),
        "oras {subcommand:?} {args:?}: {stdout}\n{stderr}"
    );
    stdout
}

/// `oras pull` of `plugins/filter-keys@<digest>` into `dir` writes the titled layer, byte for byte
/// `original`.
fn oras_pulls(registry: &Registry, digest: &str, dir: &Path, original: &[u8]) {
    oras(
        registry,
        &["pull"],
        &[
            "-o",
            "out",
            &format!("{}/plugins/filter-keys@{digest}", registry.host()),
        ],
        dir,
    );
    assert_eq!(std::fs::read(dir.join("out/filter-keys.wasm")).unwrap(), original);
}

/// Pushes `wasm` with oras under `reference` (`repo:tag`) with the given config and layer media
/// types; returns the manifest digest.
fn oras_push(
    registry: &Registry,
    reference: &str,
    wasm: &[u8],
    config_type: &str,
    layer_type: &str,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("plugin.wasm"), wasm).unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"architecture":"wasm","os":"wasip2"}"#,
    )
    .unwrap();
    let out = oras(
        registry,
        &["push"],
        &[
            "--config",
            &format!("config.json:{config_type}"),
            "--format",
            "go-template={{.digest}}",
            &format!("{}/{reference}", registry.host()),
            &format!("plugin.wasm:{layer_type}"),
        ],
        dir.path(),
    );
    out.trim().to_owned()
}

fn oci(dir: &Path) -> Oci {
    Oci::new(OciSettings {
        cache_dir: dir.to_owned(),
        timeout: Duration::from_secs(30),
        ..OciSettings::default()
    })
    .unwrap()
}

fn reference(registry: &Registry, path: &str) -> OciReference {
    format!("oci://{}/{path}", registry.host()).parse().unwrap()
}

#[tokio::test]
async fn mimeo_pushes_what_oras_and_mimeo_pull_byte_for_byte() {
    let registry = registry().await;
    let cli = Cli::new();
    let plugin = filter_keys();
    let original = std::fs::read(&plugin).unwrap();
    let target = format!("oci://{}/plugins/filter-keys:v1", registry.host());
    let pushed = succeeded(&cli.run(&[
        "plugin",
        "push",
        plugin.to_str().unwrap(),
        &target,
        "--description",
        "Keeps only the keys you name",
    ]));
    let digest = field(&pushed, "digest");
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{pushed}");
    assert_eq!(field(&pushed, "pinned"), format!("{target}@{digest}"));

    // The CNCF Wasm layout, as oras sees it.
    let work = tempfile::tempdir().unwrap();
    let manifest: Value = serde_json::from_str(&oras(
        &registry,
        &["manifest", "fetch"],
        &[&format!("{}/plugins/filter-keys:v1", registry.host())],
        work.path(),
    ))
    .unwrap();
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest["layers"].as_array().unwrap().len(), 1);
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    assert_eq!(
        manifest["annotations"]["dev.mimeo.interface"],
        "mimeo:transform@0.2.0"
    );
    assert_eq!(
        manifest["annotations"]["org.opencontainers.image.description"],
        "Keeps only the keys you name"
    );
    let config: Value = serde_json::from_str(&oras(
        &registry,
        &["blob", "fetch"],
        &[
            "--output",
            "-",
            &format!(
                "{}/plugins/filter-keys@{}",
                registry.host(),
                manifest["config"]["digest"].as_str().unwrap()
            ),
        ],
        work.path(),
    ))
    .unwrap();
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    let exports = config["component"]["exports"].to_string();
    assert!(exports.contains("mimeo:transform/transformer@0.2.0"), "{config}");

    // oras pull writes the titled layer: the very bytes pushed.
    oras_pulls(&registry, &digest, work.path(), &original);

    // mimeo pull, by tag and by digest.
    for source in [target.clone(), format!("{target}@{digest}")] {
        let file = work.path().join("pulled.wasm");
        let pulled = succeeded(&cli.run(&["plugin", "pull", &source, "-o", file.to_str().unwrap()]));
        assert_eq!(field(&pulled, "digest"), digest);
        assert_eq!(std::fs::read(&file).unwrap(), original, "{source}");
        std::fs::remove_file(&file).unwrap();
    }

    // inspect reads it from the registry.
    let inspected = succeeded(&cli.run(&["plugin", "inspect", &target]));
    for expected in [
        "plugin:      filter-keys",
        "interface:   mimeo:transform@0.2.0",
        "dev.mimeo.interface: mimeo:transform@0.2.0",
        "org.opencontainers.image.description: Keeps only the keys you name",
    ] {
        assert!(
            inspected.contains(expected),
            "missing {expected:?} in\n{inspected}"
        );
    }
    assert_eq!(field(&inspected, "manifest"), digest);
}

/// A registry whose certificate comes from a private CA: `--ca-file` trusts that CA (and reaches
/// the registry over HTTPS, on loopback too), oras reads what mimeo pushed with the same CA, and
/// each wrong setting fails with a message that says what to change.
#[tokio::test]
async fn ca_file_trusts_a_registry_with_a_private_ca() {
    let registry = Registry::start_tls().await.unwrap_or_else(|e| panic!("{e}"));
    let other = Registry::start_tls().await.unwrap_or_else(|e| panic!("{e}"));
    let cli = Cli::new();
    let plugin = filter_keys();
    let plugin = plugin.to_str().unwrap();
    let original = std::fs::read(plugin).unwrap();
    let target = format!("oci://{}/plugins/filter-keys:tls", registry.host());
    let ca = registry.ca_path().unwrap().to_str().unwrap();
    let failed = |args: &[&str], expected: &str| {
        let output = cli.run(args);
        let (stdout, stderr) = text(&output);
        assert!(!output.status.success(), "{args:?} succeeded: {stdout}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    };

    // Loopback without a CA is plain HTTP, which the registry refuses.
    failed(&["plugin", "push", plugin, &target], "the registry serves HTTPS");
    // Another CA does not vouch for this registry's certificate.
    let other_ca = other.ca_path().unwrap().to_str().unwrap();
    failed(
        &["plugin", "push", plugin, &target, "--ca-file", other_ca],
        "private CA",
    );
    // Files that hold no CA, and settings that contradict each other, are refused before any
    // request.
    let work = tempfile::tempdir().unwrap();
    let not_pem = work.path().join("not-a-ca.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    failed(
        &[
            "plugin",
            "pull",
            &target,
            "-o",
            "x.wasm",
            "--ca-file",
            not_pem.to_str().unwrap(),
        ],
        "holds no PEM certificate",
    );
    failed(
        &[
            "plugin",
            "pull",
            &target,
            "-o",
            "x.wasm",
            "--ca-file",
            ca,
            "--insecure",
        ],
        "cannot be used with",
    );

    let pushed = succeeded(&cli.run(&["plugin", "push", plugin, &target, "--ca-file", ca]));
    let digest = field(&pushed, "digest");
    // oras, given the same CA, reads the very bytes.
    oras_pulls(&registry, &digest, work.path(), &original);
    let file = work.path().join("pulled.wasm");
    let pulled = succeeded(&cli.run(&[
        "plugin",
        "pull",
        &target,
        "-o",
        file.to_str().unwrap(),
        "--ca-file",
        ca,
    ]));
    assert_eq!(field(&pulled, "digest"), digest);
    assert_eq!(std::fs::read(&file).unwrap(), original);
}

/// Runs the filter-keys `include-one-key` fixture through `mimeo plugin test` with `plugin`.
fn run_fixture(cli: &Cli, plugin: &str) -> Output {
    let case = fixture("include-one-key");
    cli.run(&[
        "plugin",
        "test",
        "--json",
        plugin,
        "-f",
        case.join("object.yaml").to_str().unwrap(),
        "--config",
        &format!("@{}", case.join("config.json").display()),
    ])
}

#[tokio::test]
async fn oras_pushed_plugins_run_through_plugin_test() {
    let registry = registry().await;
    let cli = Cli::new();
    let wasm = std::fs::read(filter_keys()).unwrap();
    let expected: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(fixture("include-one-key").join("expected.yaml")).unwrap(),
    )
    .unwrap();

    // The CNCF layout, and Kubewarden's layer media type.
    let cncf = registry.push_wasm("plugins/filter-keys:oras", &wasm).unwrap();
    let kubewarden = oras_push(
        &registry,
        "plugins/filter-keys:kubewarden",
        &wasm,
        "application/vnd.wasm.config.v1+json",
        "application/vnd.wasm.content.layer.v1+wasm",
    );
    for (tag, digest) in [("oras", cncf), ("kubewarden", kubewarden)] {
        for plugin in [
            format!("oci://{}/plugins/filter-keys:{tag}", registry.host()),
            format!("oci://{}/plugins/filter-keys@{digest}", registry.host()),
        ] {
            let stdout = succeeded(&run_fixture(&cli, &plugin));
            let got: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(got, expected, "{plugin}");
        }
    }

    // A chain mixing a file and a registry plugin.
    let file = filter_keys();
    let mixed = cli.run(&[
        "plugin",
        "test",
        "--json",
        file.to_str().unwrap(),
        &format!("oci://{}/plugins/filter-keys:oras", registry.host()),
        "-f",
        fixture("include-one-key").join("object.yaml").to_str().unwrap(),
        "--config",
        r#"{"include": ["*"]}"#,
        "--config",
        r#"{"include": [".dockerconfigjson"]}"#,
    ]);
    assert_eq!(
        serde_json::from_str::<Value>(&succeeded(&mixed)).unwrap(),
        expected
    );

    // Something else in a registry is refused by its media type, before running anything.
    oras_push(
        &registry,
        "images/tarball:1",
        &wasm,
        "application/vnd.oci.image.config.v1+json",
        "application/vnd.oci.image.layer.v1.tar",
    );
    let refused = run_fixture(&cli, &format!("oci://{}/images/tarball:1", registry.host()));
    let (_, stderr) = text(&refused);
    assert!(!refused.status.success());
    assert!(stderr.contains("is not a Wasm plugin artifact"), "{stderr}");
    assert!(
        stderr.contains("application/vnd.oci.image.layer.v1.tar"),
        "{stderr}"
    );

    let missing = run_fixture(&cli, &format!("oci://{}/plugins/absent:1", registry.host()));
    assert!(text(&missing).1.contains("was not found"), "{:?}", text(&missing));
}

#[tokio::test]
async fn push_refuses_what_mimeo_could_not_run() {
    let registry = registry().await;
    let cli = Cli::new();
    let not_wasm = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let core_module = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(core_module.path(), b"\0asm\x01\0\0\0").unwrap();
    for (file, why) in [
        (not_wasm.as_path(), "not a WebAssembly component"),
        (core_module.path(), "core WebAssembly module"),
    ] {
        let output = cli.run(&[
            "plugin",
            "push",
            file.to_str().unwrap(),
            &format!("oci://{}/plugins/bad:1", registry.host()),
        ]);
        let (_, stderr) = text(&output);
        assert!(!output.status.success());
        assert!(stderr.contains(why), "{stderr}");
    }
    assert_eq!(
        registry
            .get_status("/v2/plugins/bad/manifests/1", None)
            .await
            .unwrap(),
        404,
        "nothing was pushed"
    );
    let untagged = cli.run(&[
        "plugin",
        "push",
        filter_keys().to_str().unwrap(),
        &format!("oci://{}/plugins/bad", registry.host()),
    ]);
    assert!(
        text(&untagged).1.contains("mimeo does not assume :latest"),
        "{:?}",
        text(&untagged)
    );
}

#[tokio::test]
async fn basic_auth_is_needed_and_never_shown() {
    let registry = Registry::start_with_auth(USER, PASSWORD)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let cli = Cli::new();
    let plugin = filter_keys();
    let target = format!("oci://{}/private/filter-keys:1", registry.host());
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("p.wasm");

    let anonymous = cli.run(&["plugin", "push", plugin.to_str().unwrap(), &target]);
    assert!(!anonymous.status.success());
    assert!(
        text(&anonymous).1.contains("refused the credentials"),
        "{:?}",
        text(&anonymous)
    );

    let pushed = cli.run(&[
        "plugin",
        "push",
        plugin.to_str().unwrap(),
        &target,
        "--username",
        USER,
        "--password",
        PASSWORD,
    ]);
    let digest = field(&succeeded(&pushed), "digest");

    let wrong = cli.run(&[
        "plugin",
        "pull",
        &target,
        "-o",
        out.to_str().unwrap(),
        "--username",
        USER,
        "--password",
        "wrong-pw-also-secret",
    ]);
    let (stdout, stderr) = text(&wrong);
    assert!(!wrong.status.success());
    assert!(stderr.contains("refused the credentials"), "{stderr}");
    assert!(!stderr.contains("wrong-pw-also-secret") && !stdout.contains("wrong-pw-also-secret"));

    // From the environment.
    let from_env = cli
        .command(&["plugin", "pull", &target, "-o", out.to_str().unwrap()])
        .env("MIMEO_REGISTRY_USERNAME", USER)
        .env("MIMEO_REGISTRY_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    assert_eq!(field(&succeeded(&from_env), "digest"), digest);
    let help = cli
        .command(&["plugin", "pull", "--help"])
        .env("MIMEO_REGISTRY_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    assert!(!succeeded(&help).contains(PASSWORD), "--help shows no password");

    // From a Docker config, by digest (a fresh cache, so it is really downloaded).
    use base64::Engine as _;
    let docker = work.path().join("config.json");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    std::fs::write(
        &docker,
        format!(r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#, registry.host()),
    )
    .unwrap();
    let from_config = cli.run(&[
        "plugin",
        "pull",
        &format!("{target}@{digest}"),
        "-o",
        out.to_str().unwrap(),
        "--docker-config",
        docker.to_str().unwrap(),
        "--artifact-cache-dir",
        work.path().join("fresh-cache").to_str().unwrap(),
    ]);
    succeeded(&from_config);
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&plugin).unwrap());

    // The library's reasons.
    let cache = tempfile::tempdir().unwrap();
    let oci = oci(cache.path());
    let reference: OciReference = target.parse().unwrap();
    let err = oci.fetch(&reference, &Credentials::Anonymous).await.unwrap_err();
    assert_eq!(err.reason(), "RegistryUnauthorized", "{err}");
    let wrong = Credentials::Basic {
        username: USER.into(),
        password: "wrong-pw-also-secret".into(),
    };
    let err = oci.fetch(&reference.pinned(&digest), &wrong).await.unwrap_err();
    assert_eq!(err.reason(), "RegistryUnauthorized", "{err}");
    assert!(
        !format!("{err} {err:?}").contains("wrong-pw-also-secret"),
        "{err:?}"
    );
    let right = Credentials::Basic {
        username: USER.into(),
        password: PASSWORD.into(),
    };
    let fetched = oci.fetch(&reference, &right).await.unwrap();
    assert_eq!(fetched.manifest_digest, digest);
}

#[tokio::test]
async fn a_warm_cache_serves_pinned_references_without_the_registry() {
    let registry = registry().await;
    let wasm = std::fs::read(filter_keys()).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let tagged = reference(&registry, "plugins/cached:1");

    let first = Arc::new(oci(cache.path()));
    let annotations = BTreeMap::from([(
        "dev.mimeo.interface".to_owned(),
        "mimeo:transform@0.1.0".to_owned(),
    )]);
    let digest = first
        .push(&wasm, &tagged, &Credentials::Anonymous, annotations)
        .await
        .unwrap();
    assert_eq!(
        first.resolve(&tagged, &Credentials::Anonymous).await.unwrap(),
        digest
    );
    let pinned = tagged.pinned(&digest);
    assert_eq!(
        first.resolve(&pinned, &Credentials::Anonymous).await.unwrap(),
        digest
    );
    let before = first.requests();

    // Eight rules asking at once share one download: one manifest read and one layer read.
    let fetches = (0..8).map(|_| {
        let (oci, pinned) = (first.clone(), pinned.clone());
        tokio::spawn(async move { oci.fetch(&pinned, &Credentials::Anonymous).await })
    });
    for fetched in futures::future::join_all(fetches).await {
        let fetched = fetched.unwrap().unwrap();
        assert_eq!(*fetched.bytes, wasm);
        assert_eq!(fetched.manifest_digest, digest);
        assert_eq!(
            fetched.annotations["dev.mimeo.interface"],
            "mimeo:transform@0.1.0"
        );
    }
    assert_eq!(first.requests() - before, 2, "one download for eight callers");

    // A restart: a new client on the same directory, and no registry at all.
    drop(registry);
    let second = oci(cache.path());
    let fetched = second.fetch(&pinned, &Credentials::Anonymous).await.unwrap();
    assert!(fetched.from_cache);
    assert_eq!(*fetched.bytes, wasm);
    assert_eq!(fetched.layer_digest, mimeo::sync::hash::digest_bytes(&wasm));
    assert_eq!(
        fetched.annotations["dev.mimeo.interface"],
        "mimeo:transform@0.1.0"
    );
    assert_eq!(second.requests(), 0);

    // A tag still needs the registry, which is gone.
    let err = second.fetch(&tagged, &Credentials::Anonymous).await.unwrap_err();
    assert_eq!(err.reason(), "RegistryUnreachable", "{err}");
}

#[tokio::test]
async fn wrong_digests_and_oversized_artifacts_are_refused() {
    let registry = registry().await;
    let wasm = std::fs::read(filter_keys()).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let oci = oci(cache.path());
    let a = reference(&registry, "plugins/a:1");
    let b = reference(&registry, "plugins/b:1");
    let digest_a = registry.push_wasm("plugins/a:1", &wasm).unwrap();
    let digest_b = oci
        .push(&wasm, &b, &Credentials::Anonymous, BTreeMap::new())
        .await
        .unwrap();
    assert_ne!(digest_a, digest_b);

    // `a:1` pinned to b's digest: the digest wins, and repository a has no such manifest.
    let crossed = a.pinned(&digest_b);
    let err = oci.fetch(&crossed, &Credentials::Anonymous).await.unwrap_err();
    assert!(
        matches!(err, OciError::DigestMismatch { .. } | OciError::NotFound { .. }),
        "{err:?}"
    );
    let err = oci
        .fetch(
            &a.pinned(&mimeo::sync::hash::digest_bytes(b"nothing")),
            &Credentials::Anonymous,
        )
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ArtifactNotFound", "{err}");
    let err = oci
        .resolve(
            &reference(&registry, "plugins/a:missing"),
            &Credentials::Anonymous,
        )
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ArtifactNotFound", "{err}");

    // Too large: refused from the manifest's size, before the layer is asked for.
    let small = tempfile::tempdir().unwrap();
    let strict = Oci::new(OciSettings {
        cache_dir: small.path().to_owned(),
        max_artifact_bytes: 4096,
        ..OciSettings::default()
    })
    .unwrap();
    let err = strict
        .fetch(&a.pinned(&digest_a), &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(
        matches!(err, OciError::TooLarge { size, limit: 4096 } if size == wasm.len() as u64),
        "{err:?}"
    );
    assert_eq!(err.reason(), "ArtifactTooLarge");
    assert_eq!(strict.requests(), 1, "only the manifest was read");
    let err = strict
        .push(
            &wasm,
            &reference(&registry, "plugins/big:1"),
            &Credentials::Anonymous,
            BTreeMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ArtifactTooLarge");
    assert!(
        std::fs::read_dir(small.path().join("blobs/sha256"))
            .unwrap()
            .next()
            .is_none(),
        "nothing refused is cached"
    );
}

// Hostile registries. A rule's author names the registry, and the registry names its token
// service and where its redirects go; these are scripted servers (`mimeo_envtest::Scripted`)
// doing what a hostile registry would, each beside a "sidecar" that must not be reached at all.

/// A plugin as a scripted registry serves it at `p:1`: the manifest, its digest and the layer.
struct Artifact {
    manifest: Vec<u8>,
    digest: String,
    layer: Vec<u8>,
    layer_digest: String,
}

fn artifact() -> Artifact {
    use mimeo::sync::hash::digest_bytes;
    let layer = std::fs::read(filter_keys()).unwrap();
    let config = br#"{"architecture":"wasm","os":"wasip2"}"#;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json",
                   "digest": digest_bytes(config), "size": config.len()},
        "layers": [{"mediaType": "application/wasm", "digest": digest_bytes(&layer), "size": layer.len()}],
    })
    .to_string()
    .into_bytes();
    Artifact {
        digest: digest_bytes(&manifest),
        layer_digest: digest_bytes(&layer),
        manifest,
        layer,
    }
}

impl Artifact {
    /// What a registry that holds only this artifact, as `p:1`, answers.
    fn serve(&self, asked: &Asked) -> Answer {
        let manifest_paths = [
            "/v2/p/manifests/1".to_owned(),
            format!("/v2/p/manifests/{}", self.digest),
        ];
        if manifest_paths.iter().any(|p| p == asked.path()) {
            return Answer::new(200)
                .header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                .header("Docker-Content-Digest", &self.digest)
                .body(self.manifest.clone());
        }
        if asked.path() == format!("/v2/p/blobs/{}", self.layer_digest) {
            return Answer::new(200).body(self.layer.clone());
        }
        Answer::new(404)
    }
}

/// A 401 with a Bearer challenge naming `realm`.
fn challenge(realm: &str) -> Answer {
    Answer::new(401).header(
        "WWW-Authenticate",
        &format!(r#"Bearer realm="{realm}",service="scripted",scope="repository:p:pull""#),
    )
}

/// A token service that hands out `token`.
fn token_service(token: &'static str) -> impl Fn(&Asked) -> Answer + Send + Sync + 'static {
    move |_| Answer::new(200).body(format!(r#"{{"token": "{token}", "expires_in": 300}}"#))
}

/// A registry that wants `Bearer <token>` from the realm `realm`, and serves `artifact`.
fn token_registry(
    artifact: Arc<Artifact>,
    realm: String,
    token: &'static str,
) -> impl Fn(&Asked) -> Answer + Send + Sync + 'static {
    move |asked| {
        if asked.header("authorization") == Some(&format!("Bearer {token}")) {
            artifact.serve(asked)
        } else {
            challenge(&realm)
        }
    }
}

/// The sidecar a hostile registry points at: it would hand out anything, and must never be asked.
async fn sidecar() -> Scripted {
    Scripted::start(token_service("stolen")).await.unwrap()
}

/// One PEM file with the CAs of these TLS servers, for `--ca-file`.
fn ca_bundle(dir: &Path, servers: &[&Scripted]) -> PathBuf {
    let bundle: String = servers
        .iter()
        .map(|s| std::fs::read_to_string(s.ca_path().unwrap()).unwrap())
        .collect();
    let path = dir.join("bundle.pem");
    std::fs::write(&path, bundle).unwrap();
    path
}

/// `mimeo plugin pull oci://<host>/<path>` with `extra` flags, with an artifact cache of its own
/// (a cached artifact would need no registry); its output.
fn pull_path(cli: &Cli, host: &str, path: &str, dir: &Path, extra: &[&str]) -> Output {
    let out = dir.join("pulled.wasm");
    let cache = tempfile::tempdir().unwrap();
    let reference = format!("oci://{host}/{path}");
    let mut args = vec![
        "plugin",
        "pull",
        &reference,
        "-o",
        out.to_str().unwrap(),
        "--artifact-cache-dir",
        cache.path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    cli.run(&args)
}

fn pull(cli: &Cli, host: &str, dir: &Path, extra: &[&str]) -> Output {
    pull_path(cli, host, "p:1", dir, extra)
}

fn failed_with(output: &Output, expected: &[&str]) -> String {
    let (stdout, stderr) = text(output);
    assert!(!output.status.success(), "succeeded: {stdout}");
    for expected in expected {
        assert!(stderr.contains(expected), "no {expected:?} in: {stderr}");
    }
    stderr
}

/// A registry reached over HTTPS may not send mimeo to a plain-HTTP token service, nor to a
/// metadata or link-local one: the realm is refused before anything is sent, and the sidecar it
/// names gets not even a connection. Its twin: a token service over HTTPS on the same kind of
/// address as the registry (loopback) is asked, with the scope, and the pull completes.
// Multi-threaded: the scripted servers answer while the test waits for the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_realms_an_https_registry_names_are_checked_before_they_are_asked() {
    let sidecar = sidecar().await;
    let artifact = Arc::new(artifact());
    let cli = Cli::new();
    let work = tempfile::tempdir().unwrap();

    for (realm, why) in [
        (
            format!("http://127.0.0.1:{}/token", sidecar.port()),
            "it is plain HTTP, and the registry is reached over HTTPS",
        ),
        (
            format!("http://localhost:{}/token", sidecar.port()),
            "it is plain HTTP",
        ),
        (
            "https://169.254.169.254/latest/api/token".to_owned(),
            "a cloud metadata address",
        ),
        (
            "https://metadata.google.internal/computeMetadata/v1/token".to_owned(),
            "a cloud metadata address",
        ),
        ("https://169.254.7.7/token".to_owned(), "a link-local address"),
    ] {
        let script_realm = realm.clone();
        let hostile = Scripted::start_tls(move |_| challenge(&script_realm))
            .await
            .unwrap();
        let ca = hostile.ca_path().unwrap().to_str().unwrap().to_owned();
        let output = pull(&cli, &hostile.host(), work.path(), &["--ca-file", &ca]);
        failed_with(&output, &["named the token service", &realm, why]);
        assert!(!hostile.requests().is_empty(), "the registry was asked");
    }
    assert_eq!(sidecar.connections(), 0, "the sidecar was reached");

    // The twin: a token service over HTTPS beside the registry on loopback.
    let realm = Scripted::start_tls(token_service("good")).await.unwrap();
    let registry = Scripted::start_tls(token_registry(
        artifact.clone(),
        format!("https://127.0.0.1:{}/token", realm.port()),
        "good",
    ))
    .await
    .unwrap();
    let bundle = ca_bundle(work.path(), &[&registry, &realm]);
    let output = pull(
        &cli,
        &registry.host(),
        work.path(),
        &["--ca-file", bundle.to_str().unwrap()],
    );
    assert_eq!(field(&succeeded(&output), "digest"), artifact.digest);
    assert_eq!(
        std::fs::read(work.path().join("pulled.wasm")).unwrap(),
        artifact.layer
    );
    let asked = realm.requests();
    assert_eq!(asked.len(), 1, "one token for the pull: {asked:?}");
    assert!(
        asked[0].target.contains("scope=repository%3Ap%3Apull")
            && asked[0].target.contains("service=scripted"),
        "{asked:?}"
    );
}

/// A registry that is not on loopback may not send mimeo to loopback: a realm there is refused
/// (plain HTTP is allowed, the registry being marked insecure), and the sidecar gets nothing. Its
/// twin: a realm on the registry's own address is asked, and the pull completes.
// Multi-threaded: the scripted servers answer while the test waits for the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_elsewhere_may_not_name_a_realm_on_loopback() {
    let ip = mimeo_envtest::local_address()
        .expect("this test needs an IPv4 address of this machine other than loopback");
    let sidecar = sidecar().await;
    let artifact = Arc::new(artifact());
    let cli = Cli::new();
    let work = tempfile::tempdir().unwrap();

    let realm = format!("http://127.0.0.1:{}/token", sidecar.port());
    let hostile = Scripted::start_on(ip, token_registry(artifact.clone(), realm.clone(), "good"))
        .await
        .unwrap();
    let output = pull(&cli, &hostile.host(), work.path(), &["--insecure"]);
    failed_with(
        &output,
        &[
            &realm,
            "it is on this machine (loopback), and the registry is not",
        ],
    );
    assert!(!hostile.requests().is_empty(), "the registry was asked");
    assert_eq!(sidecar.connections(), 0, "the sidecar was reached");

    let realm = Scripted::start_on(ip, token_service("good")).await.unwrap();
    let registry = Scripted::start_on(
        ip,
        token_registry(artifact.clone(), format!("http://{}/token", realm.host()), "good"),
    )
    .await
    .unwrap();
    let output = pull(&cli, &registry.host(), work.path(), &["--insecure"]);
    assert_eq!(field(&succeeded(&output), "digest"), artifact.digest);
    assert_eq!(realm.requests().len(), 1);
}

/// Redirects: a blob may be sent on to storage (the twin), but not more than five times, not
/// from HTTPS to plain HTTP, and not to loopback from a registry elsewhere; a refused one reaches
/// nobody.
// Multi-threaded: the scripted servers answer while the test waits for the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_few_and_checked() {
    let sidecar = sidecar().await;
    let artifact = Arc::new(artifact());
    let cli = Cli::new();
    let work = tempfile::tempdir().unwrap();
    let blob = format!("/v2/p/blobs/{}", artifact.layer_digest);

    // To storage beside the registry: followed.
    let layer = artifact.layer.clone();
    let storage = Scripted::start_tls(move |_| Answer::new(200).body(layer.clone()))
        .await
        .unwrap();
    let (served, location, to) = (artifact.clone(), blob.clone(), storage.port());
    let registry = Scripted::start_tls(move |asked| {
        if asked.path() == location {
            Answer::new(307).header("Location", &format!("https://127.0.0.1:{to}/bucket/layer?sig=1"))
        } else {
            served.serve(asked)
        }
    })
    .await
    .unwrap();
    let bundle = ca_bundle(work.path(), &[&registry, &storage]);
    let output = pull(
        &cli,
        &registry.host(),
        work.path(),
        &["--ca-file", bundle.to_str().unwrap()],
    );
    assert_eq!(field(&succeeded(&output), "digest"), artifact.digest);
    assert_eq!(storage.requests().len(), 1);

    // Round and round: the sixth redirect is not followed.
    let (served, location) = (artifact.clone(), blob.clone());
    let circular = Scripted::start_tls(move |asked| {
        if asked.path() == location || asked.path().starts_with("/hop/") {
            let hop: u32 = asked
                .path()
                .strip_prefix("/hop/")
                .map_or(0, |n| n.parse().unwrap());
            Answer::new(302).header("Location", &format!("/hop/{}", hop + 1))
        } else {
            served.serve(asked)
        }
    })
    .await
    .unwrap();
    let ca = circular.ca_path().unwrap().to_str().unwrap().to_owned();
    failed_with(
        &pull(&cli, &circular.host(), work.path(), &["--ca-file", &ca]),
        &["sent mimeo to", "more than 5 redirects"],
    );
    let hops = circular
        .requests()
        .iter()
        .filter(|a| a.path().starts_with("/hop/"))
        .count();
    assert_eq!(hops, 5, "five redirects followed, no more");

    // HTTPS to plain HTTP, to the sidecar.
    let (served, location, to) = (artifact.clone(), blob.clone(), sidecar.port());
    let downgrading = Scripted::start_tls(move |asked| {
        if asked.path() == location {
            Answer::new(302).header("Location", &format!("http://127.0.0.1:{to}/steal"))
        } else {
            served.serve(asked)
        }
    })
    .await
    .unwrap();
    let ca = downgrading.ca_path().unwrap().to_str().unwrap().to_owned();
    failed_with(
        &pull(&cli, &downgrading.host(), work.path(), &["--ca-file", &ca]),
        &["sent mimeo to http://127.0.0.1", "it is plain HTTP"],
    );

    // From a registry elsewhere to loopback, over plain HTTP as the registry is.
    if let Some(ip) = mimeo_envtest::local_address() {
        let (served, location, to) = (artifact.clone(), blob.clone(), sidecar.port());
        let elsewhere = Scripted::start_on(ip, move |asked| {
            if asked.path() == location {
                Answer::new(302).header("Location", &format!("http://127.0.0.1:{to}/steal"))
            } else {
                served.serve(asked)
            }
        })
        .await
        .unwrap();
        failed_with(
            &pull(&cli, &elsewhere.host(), work.path(), &["--insecure"]),
            &["sent mimeo to http://127.0.0.1", "on this machine (loopback)"],
        );
    }
    assert_eq!(sidecar.connections(), 0, "the sidecar was reached");
}

/// What a registry writes in an error's body never reaches the message: only the status code,
/// in mimeo's words. The same for its token service and for a manifest that is not one.
// Multi-threaded: the scripted servers answer while the test waits for the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registrys_error_bodies_are_never_shown() {
    const MARKER: &str = "MARKER-7c1e-give-me-your-credentials";
    let artifact = Arc::new(artifact());
    let cli = Cli::new();
    let work = tempfile::tempdir().unwrap();
    let envelope = format!(r#"{{"errors": [{{"code": "DENIED", "message": "{MARKER}"}}]}}"#);
    let pinned = format!("p@{}", artifact.digest);

    let answering = |status: u16| {
        let envelope = envelope.clone();
        move |_: &Asked| {
            Answer::new(status)
                .header("Content-Type", "application/json")
                .body(envelope.clone())
        }
    };
    let bad_manifest = format!(r#"{{"schemaVersion": "{MARKER}", "layers": []}}"#);
    let token_refused = {
        let envelope = envelope.clone();
        move |_: &Asked| Answer::new(401).body(envelope.clone())
    };
    let no_token = move |_: &Asked| Answer::new(200).body(format!("<html>{MARKER}</html>"));
    let token_services = [
        Scripted::start(token_refused).await.unwrap(),
        Scripted::start(no_token).await.unwrap(),
    ];
    let mut cases: Vec<(Scripted, &str, &str)> = vec![
        (
            Scripted::start(answering(403)).await.unwrap(),
            "p:1",
            "answered 403 Forbidden",
        ),
        (
            Scripted::start(answering(500)).await.unwrap(),
            "p:1",
            "answered 500 Internal Server Error",
        ),
        (
            Scripted::start(answering(403)).await.unwrap(),
            &pinned,
            "answered 403 Forbidden to GET",
        ),
        (
            Scripted::start(answering(400)).await.unwrap(),
            &pinned,
            "answered 400 Bad Request to GET",
        ),
    ];
    let served = artifact.clone();
    let layer_path = format!("/v2/p/blobs/{}", artifact.layer_digest);
    let layer_fails = move |asked: &Asked| {
        if asked.path() == layer_path {
            Answer::new(500).body(MARKER)
        } else {
            served.serve(asked)
        }
    };
    cases.push((
        Scripted::start(layer_fails).await.unwrap(),
        "p:1",
        "answered 500 Internal Server Error to GET /v2/p/blobs/",
    ));
    let not_a_manifest = {
        let body = bad_manifest.clone();
        move |_: &Asked| Answer::new(200).body(body.clone())
    };
    cases.push((
        Scripted::start(not_a_manifest).await.unwrap(),
        "p:1",
        "is not an image manifest",
    ));
    for (service, expected) in token_services
        .iter()
        .zip(["the token service at", "answered with no token"])
    {
        let realm = format!("http://{}/token", service.host());
        cases.push((
            Scripted::start(move |_: &Asked| challenge(&realm)).await.unwrap(),
            "p:1",
            expected,
        ));
    }
    for (server, path, expected) in &cases {
        let output = pull_path(&cli, &server.host(), path, work.path(), &[]);
        let stderr = failed_with(&output, &[expected]);
        assert!(!stderr.contains("MARKER"), "the body was shown: {stderr}");
        assert!(!server.requests().is_empty());
    }
}

/// A manifest is read at most 4 MiB far, however large the artifact limit: a registry that sends
/// more (a manifest of 5 MiB here, and the artifact limit at 100 MiB) is refused as too large
/// while it is read, not buffered whole first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_is_capped_before_it_is_read_whole() {
    let cli = Cli::new();
    let work = tempfile::tempdir().unwrap();
    let huge = format!(r#"{{"schemaVersion": 2, "padding": "{}"}}"#, "x".repeat(5 << 20));
    let server = Scripted::start(move |_: &Asked| {
        Answer::new(200)
            .header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
            .body(huge.clone())
    })
    .await
    .unwrap();
    let output = pull_path(&cli, &server.host(), "p:1", work.path(), &[]);
    failed_with(&output, &["more than the 4194304 allowed"]);
}

/// A Docker config that keeps the password in a credential helper (Docker Desktop's
/// `credsStore`, gcloud's `credHelpers`): `mimeo plugin push` and `pull` run the helper, a real
/// program on the PATH speaking the helpers' protocol, as docker and oras do. A helper with
/// nothing for the registry means no credentials, said in a note; a helper not installed is named.
#[tokio::test]
async fn credential_helpers_are_run_as_docker_runs_them() {
    let registry = Registry::start_with_auth(USER, PASSWORD)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let cli = Cli::new();
    let plugin = filter_keys();
    let target = format!("oci://{}/helped/filter-keys:1", registry.host());
    let work = tempfile::tempdir().unwrap();
    let bin = work.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // The helper answers for this registry only, and logs what it was asked.
    let asked = work.path().join("asked");
    let helper = bin.join("docker-credential-mimeo-test");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread -r server\necho \"$server\" >> {asked}\nif [ \"$server\" = \"{host}\" ]; then\n  printf '{{\"ServerURL\":\"%s\",\"Username\":\"{USER}\",\"Secret\":\"{PASSWORD}\"}}' \"$server\"\nelse\n  echo 'credentials not found in native keychain'\n  exit 1\nfi\n",
            asked = asked.display(),
            host = registry.host(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let docker = work.path().join("config.json");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let with_config = |config: &str, args: &[&str]| {
        std::fs::write(&docker, config).unwrap();
        let mut all = args.to_vec();
        all.extend(["--docker-config", docker.to_str().unwrap()]);
        cli.command(&all).env("PATH", &path).output().unwrap()
    };

    // credsStore: pushed with the helper's password, and pulled back.
    let store = r#"{"auths": {}, "credsStore": "mimeo-test"}"#;
    let pushed = with_config(store, &["plugin", "push", plugin.to_str().unwrap(), &target]);
    let digest = field(&succeeded(&pushed), "digest");
    let (stdout, stderr) = text(&pushed);
    assert!(!stdout.contains(PASSWORD) && !stderr.contains(PASSWORD));
    assert!(
        std::fs::read_to_string(&asked)
            .unwrap()
            .contains(&registry.host())
    );
    let out = work.path().join("p.wasm");
    let helpers = format!(r#"{{"credHelpers": {{"{}": "mimeo-test"}}}}"#, registry.host());
    let pulled = with_config(
        &helpers,
        &[
            "plugin",
            "pull",
            &format!("{target}@{digest}"),
            "-o",
            out.to_str().unwrap(),
            "--artifact-cache-dir",
            work.path().join("fresh").to_str().unwrap(),
        ],
    );
    succeeded(&pulled);
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&plugin).unwrap());

    // A helper with nothing for the registry: anonymous, and the registry's refusal.
    let elsewhere = r#"{"credHelpers": {"other.example": "mimeo-test"}, "credsStore": "mimeo-test"}"#;
    std::fs::write(
        &helper,
        "#!/bin/sh\necho 'credentials not found in native keychain'\nexit 1\n",
    )
    .unwrap();
    let refused = with_config(
        elsewhere,
        &["plugin", "pull", &target, "-o", out.to_str().unwrap()],
    );
    assert!(!refused.status.success());
    let (_, stderr) = text(&refused);
    assert!(
        stderr.contains("docker-credential-mimeo-test has nothing for"),
        "{stderr}"
    );
    assert!(stderr.contains("refused the credentials"), "{stderr}");

    // A helper not installed: named, with what to do.
    let missing = with_config(
        r#"{"credsStore": "not-installed"}"#,
        &["plugin", "pull", &target, "-o", out.to_str().unwrap()],
    );
    assert!(!missing.status.success());
    let (_, stderr) = text(&missing);
    assert!(
        stderr.contains("docker-credential-not-installed") && stderr.contains("not on the PATH"),
        "{stderr}"
    );
}
