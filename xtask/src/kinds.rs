//! `cargo xtask kinds [--dir DIR]`: checks every kind file as the build will, without
//! building the Worker, and shows each kind's messages rendered for its golden inputs,
//! so that an author sees what a provider will be sent. A file that does not load
//! fails the command, named with the JSON path and what is wrong.

use crate::tools::Tools;
use anyhow::{bail, Context, Result};
use onceclick_protocol::contract::{load_dir, Answer, KindFile};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;

/// Checks `dir`'s kind files and prints them rendered; an error lists every broken file.
/// Then the providers of `root`'s configurations: each loads, every provider a kind
/// names is configured, and the local one's secrets are in `.dev.vars`.
pub(crate) fn run(root: &Path, dir: &Path) -> Result<()> {
    let files = check(dir)?;
    for file in &files {
        print!("{}", rendered(file));
    }
    println!(
        "{} kind files in {}: every one loads, as the build will load it.",
        files.len(),
        dir.display()
    );
    let kinds: Vec<_> = files.iter().map(|f| &f.kind).collect();
    let local = std::fs::read_to_string(root.join(".dev.vars")).unwrap_or_default();
    for (config, secrets) in [
        ("wrangler.toml", Some(local.as_str())),
        ("wrangler.production.toml", None),
    ] {
        for line in providers_check(&root.join(config), &kinds, secrets)? {
            println!("{config}: {line}");
        }
    }
    Ok(())
}

/// The providers `config` declares, checked against the kinds: every provider a kind
/// names is configured; with `secrets` (a `.dev.vars` text), every secret a provider
/// names is set there. What it needs, one line each; an error names what is wrong.
pub(crate) fn providers_check(
    config: &Path,
    kinds: &[&onceclick_protocol::contract::Kind],
    secrets: Option<&str>,
) -> Result<Vec<String>> {
    let providers = crate::certify::providers_of(config)?;
    let mut lines = Vec::new();
    for kind in kinds {
        for name in &kind.decl().providers {
            if !providers.iter().any(|p| &p.name == name) {
                bail!(
                    "{}: kind {} names provider {name:?}, which it does not configure",
                    config.display(),
                    kind.name()
                );
            }
        }
    }
    for provider in &providers {
        let needed: Vec<&str> = provider.secrets().collect();
        if let Some(vars) = secrets {
            let set = |name: &str| {
                vars.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{name}=")))
            };
            if let Some(missing) = needed.iter().find(|name| !set(name)) {
                bail!(
                    "{}: provider {} names the secret {missing}, which .dev.vars does not set",
                    config.display(),
                    provider.name
                );
            }
        }
        lines.push(match needed.is_empty() {
            true => format!("provider {} needs no secret", provider.name),
            false => format!(
                "provider {} needs the secrets {}",
                provider.name,
                needed.join(", ")
            ),
        });
    }
    Ok(lines)
}

/// The kind files of `dir`, or an error that names each broken one.
pub(crate) fn check(dir: &Path) -> Result<Vec<KindFile>> {
    match load_dir(dir) {
        Ok(files) => Ok(files),
        Err(errors) => bail!("the kind files do not load:\n  {}", errors.join("\n  ")),
    }
}

/// What an author reads of one kind: its contract version, its answer's form and
/// parameters, and for each golden input the messages as the provider gets them.
fn rendered(file: &KindFile) -> String {
    let kind = &file.kind;
    let form = match kind.answer() {
        Answer::Json => "a JSON object (strict json_schema)",
        Answer::Text => "text",
    };
    let mut out = String::new();
    let _ = writeln!(out, "== {} ({})", kind.name(), file.path.display());
    let _ = writeln!(out, "contract version {}", kind.contract_version());
    let _ = writeln!(out, "answer: {form}");
    let parameters = kind.decl().parameters.sent();
    let _ = writeln!(
        out,
        "parameters: {}",
        serde_json::Value::Object(parameters.clone())
    );
    for (i, (input, output)) in kind.golden().enumerate() {
        let _ = writeln!(out, "-- golden input {i}: {input}");
        for (role, content) in kind.render_messages(input) {
            let _ = writeln!(out, "[{}]", role.as_str());
            let _ = writeln!(out, "{content}");
        }
        if let Some(output) = output {
            let _ = writeln!(out, "-- its output: {output}");
        }
    }
    out.push('\n');
    out
}

/// Writes the TypeScript module of `dir`'s kinds to `out` ([`typescript`]).
pub(crate) fn write_types(tools: &Tools, dir: &Path, out: &Path) -> Result<()> {
    let text = typescript(tools, &check(dir)?)?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))
}

/// The TypeScript module of `files`' kinds: each kind's input and result types, made
/// from its schemas by json-schema-to-typescript (`xtask/kinds-types.cjs`), and the
/// package's `Kinds` interface filled with them. A text answer's result is `string`.
pub(crate) fn typescript(tools: &Tools, files: &[KindFile]) -> Result<String> {
    let kinds: Vec<serde_json::Value> = files
        .iter()
        .map(|file| {
            let decl = file.kind.decl();
            serde_json::json!({
                "name": file.kind.name(),
                "description": decl.description,
                "input_schema": decl.input_schema,
                "output_schema": file.kind.output_schema(),
            })
        })
        .collect();
    let mut child = tools
        .command("node")
        .arg(tools.root.join("xtask/kinds-types.cjs"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting node for xtask/kinds-types.cjs")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(serde_json::json!({ "kinds": kinds }).to_string().as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "xtask/kinds-types.cjs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::project_root;

    /// A copy of the shipped kinds in a fresh directory, plus `extra` files; removed
    /// when dropped.
    struct Copy(std::path::PathBuf);

    impl Copy {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Copy {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn copy_with(extra: &[(&str, &str)]) -> Copy {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("onceclick-kinds-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(project_root().join("edge/kinds")).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
        for (name, text) in extra {
            std::fs::write(dir.join(name), text).unwrap();
        }
        Copy(dir)
    }

    #[test]
    fn the_shipped_kinds_load_and_render_their_golden_prompts() {
        let files = check(&project_root().join("edge/kinds")).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.kind.name()).collect();
        for name in ["classify", "extract", "summarize", "translate"] {
            assert!(names.contains(&name), "{names:?}");
        }
        let translate = files.iter().find(|f| f.kind.name() == "translate").unwrap();
        let text = rendered(translate);
        assert!(text.contains("answer: text"), "{text}");
        assert!(text.contains("\"max_tokens\":4000"), "{text}");
        assert!(
            text.contains("[user]\nTranslate into French:\n\nThe library opens"),
            "{text}"
        );
    }

    #[test]
    fn a_broken_file_is_named_with_its_json_path() {
        let broken = r#"{"kind": "broken", "input_schema": {"type": "object"},
            "messages": [{"role": "user", "content": "{{missing.path}}"}],
            "answer": "text", "providers": ["primary"], "golden": [{"input": {}}]}"#;
        let dir = copy_with(&[("broken.json", broken)]);
        let e = check(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("broken.json: at messages[0].content: {{missing.path}}"),
            "{e}"
        );
        assert!(
            !e.contains("summarize.json"),
            "only the broken file is named: {e}"
        );

        let typo = r#"{"kind": "typo", "input_schema": {}, "prompt": {"system": "", "user": ""},
            "output_schema": {"type": "object"}, "providers": ["primary"],
            "golden_inputs": [{}], "hedge_after": 5}"#;
        let dir = copy_with(&[("typo.json", typo)]);
        let e = check(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("typo.json: at hedge_after: unknown field `hedge_after`"),
            "{e}"
        );
    }

    /// The build itself refuses a broken kind file, naming the file and the JSON path:
    /// `core/build.rs` over a copy of the kinds with one broken file (in a target
    /// directory of its own, so that the workspace's build is not disturbed).
    #[test]
    fn a_broken_file_fails_the_build() {
        let broken = r#"{"kind": "broken", "input_schema": {"type": "object"},
            "messages": [{"role": "user", "content": "hello"}],
            "answer": "txt", "providers": ["primary"], "golden": [{"input": {}}]}"#;
        let dir = copy_with(&[("broken.json", broken)]);
        let out = std::process::Command::new(env!("CARGO"))
            .args(["check", "--quiet", "-p", "onceclick-core"])
            .env("ONCECLICK_KINDS", dir.path())
            .env(
                "CARGO_TARGET_DIR",
                project_root().join("target/kinds-build-check"),
            )
            .current_dir(project_root())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "the build passed: {stderr}");
        assert!(
            stderr.contains("broken.json: at answer: unknown variant `txt`"),
            "{stderr}"
        );
    }

    #[test]
    fn a_provider_whose_secret_is_not_set_is_refused() {
        let files = check(&project_root().join("edge/kinds")).unwrap();
        let kinds: Vec<_> = files.iter().map(|f| &f.kind).collect();
        let production = project_root().join("wrangler.production.toml");
        let lines = providers_check(&production, &kinds, None).unwrap();
        assert!(
            lines.iter().any(|l| l.contains("OPENROUTER_API_KEY")),
            "{lines:?}"
        );
        let e = providers_check(
            &production,
            &kinds,
            Some("AUTH_SECRET=x\nOPENAI_API_KEY=k\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("provider fallback names the secret OPENROUTER_API_KEY"),
            "{e}"
        );
        assert!(providers_check(
            &production,
            &kinds,
            Some("OPENAI_API_KEY=k\nOPENROUTER_API_KEY=k\n")
        )
        .is_ok());
    }

    /// The production configuration binds what the local one binds (the Worker reads
    /// the same bindings and vars), and publishes no page.
    #[test]
    fn the_production_configuration_binds_what_the_local_one_does() {
        let read = |name: &str| -> toml::Table {
            std::fs::read_to_string(project_root().join(name))
                .unwrap()
                .parse()
                .unwrap()
        };
        let (local, production) = (read("wrangler.toml"), read("wrangler.production.toml"));
        for key in [
            "main",
            "compatibility_date",
            "build",
            "durable_objects",
            "migrations",
            "queues",
            "triggers",
            "ratelimits",
            "d1_databases",
        ] {
            assert_eq!(local.get(key), production.get(key), "{key}");
        }
        let names = |t: &toml::Table| -> Vec<String> {
            t["vars"].as_table().unwrap().keys().cloned().collect()
        };
        let production_vars = names(&production);
        for var in names(&local) {
            assert!(
                production_vars.contains(&var),
                "{var} is not set in wrangler.production.toml"
            );
        }
        assert!(
            production.get("assets").is_none(),
            "no page is published in production"
        );
    }

    #[test]
    fn a_file_must_be_named_after_its_kind() {
        let text = std::fs::read_to_string(project_root().join("edge/kinds/translate.json"));
        let dir = copy_with(&[("translation.json", &text.unwrap())]);
        let e = check(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("translation.json: at kind: the file declares \"translate\""),
            "{e}"
        );
    }
}
