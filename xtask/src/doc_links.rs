//! The links between the project's documents stay unbroken: README.md, ARCHITECTURE.md,
//! the other Markdown files at the root and those in `docs/`. Every relative link
//! (`[x](path)`, `[x](path#anchor)`, `[x](#anchor)`) must name a file or folder that
//! exists, and an anchor must name a heading of the Markdown file it points into, as
//! GitHub makes them. ARCHITECTURE.md stays a map: at most 350 lines, with a link to
//! each document in `docs/`, where the detail is.

#[cfg(test)]
mod tests {
    use crate::tools::project_root;
    use std::collections::HashSet;
    use std::path::{Path, PathBuf};

    /// The longest ARCHITECTURE.md may be (issue 44): a map, not an atlas.
    pub(super) const ARCHITECTURE_MAX_LINES: usize = 350;

    /// The documents whose links are checked: every `*.md` at `root` and in `root/docs`.
    fn documents(root: &Path) -> Vec<PathBuf> {
        let mut docs = Vec::new();
        for dir in [root.to_path_buf(), root.join("docs")] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_file() && path.extension().is_some_and(|e| e == "md") {
                    docs.push(path);
                }
            }
        }
        docs.sort();
        docs
    }

    /// The text of a document outside its fenced code blocks, line by line: a fence's
    /// lines (and the fences) become empty lines, so line numbers still count.
    fn outside_fences(text: &str) -> Vec<&str> {
        let mut fence: Option<&str> = None;
        text.lines()
            .map(|line| {
                let trimmed = line.trim_start();
                let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
                match (fence, marker) {
                    (None, Some(m)) => {
                        fence = Some(m);
                        ""
                    }
                    (Some(open), Some(m)) if open == m => {
                        fence = None;
                        ""
                    }
                    (Some(_), _) => "",
                    (None, None) => line,
                }
            })
            .collect()
    }

    /// `text` with its inline code spans blanked (a run of backticks up to the next run
    /// of the same length, across lines too), so that nothing in code reads as a link.
    fn without_code_spans(text: &str) -> String {
        let chars: Vec<char> = text.chars().collect();
        let run_at = |i: usize| chars[i..].iter().take_while(|&&c| c == '`').count();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while i < chars.len() {
            if chars[i] != '`' {
                out.push(chars[i]);
                i += 1;
                continue;
            }
            let run = run_at(i);
            let mut j = i + run;
            let close = loop {
                if j >= chars.len() {
                    break None;
                }
                if chars[j] == '`' {
                    let other = run_at(j);
                    if other == run {
                        break Some(j);
                    }
                    j += other;
                } else {
                    j += 1;
                }
            };
            match close {
                Some(j) => {
                    // Keep the span's newlines, so that line numbers still count.
                    let span = &chars[i..j + run];
                    out.extend(span.iter().map(|&c| if c == '\n' { '\n' } else { ' ' }));
                    i = j + run;
                }
                None => {
                    out.extend(&chars[i..i + run]);
                    i += run;
                }
            }
        }
        out
    }

    /// Every inline link's target in `text` (outside code), with its line number: what
    /// stands between `](` and its closing parenthesis, without a title.
    fn links(text: &str) -> Vec<(usize, String)> {
        let prose = without_code_spans(&outside_fences(text).join("\n"));
        let mut found = Vec::new();
        let mut rest = prose.as_str();
        let mut offset = 0;
        while let Some(at) = rest.find("](") {
            let start = at + 2;
            let mut depth = 1;
            let mut end = None;
            for (k, c) in rest[start..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(start + k);
                            break;
                        }
                    }
                    '\n' => break,
                    _ => {}
                }
            }
            let Some(end) = end else {
                offset += start;
                rest = &rest[start..];
                continue;
            };
            let target = rest[start..end].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            let line = prose[..offset + at].matches('\n').count() + 1;
            found.push((line, target.to_owned()));
            offset += end + 1;
            rest = &rest[end + 1..];
        }
        found
    }

    /// A heading's anchor as GitHub makes it: lowercase; letters, digits, `-` and `_`
    /// kept, spaces turned into `-`, everything else (punctuation, backticks, symbols)
    /// dropped.
    fn slug(heading: &str) -> String {
        heading
            .trim()
            .chars()
            .flat_map(char::to_lowercase)
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect()
    }

    /// The anchors of a Markdown document: its ATX headings' slugs (a repeated heading
    /// gets `-1`, `-2`, … as on GitHub), and any `<a id="…">` or `<a name="…">`.
    fn anchors(text: &str) -> HashSet<String> {
        let mut seen = HashSet::new();
        for line in outside_fences(text) {
            let trimmed = line.trim_start();
            let level = trimmed.chars().take_while(|&c| c == '#').count();
            let heading = &trimmed[level..];
            if (1..=6).contains(&level) && (heading.is_empty() || heading.starts_with(' ')) {
                let base = slug(heading.trim().trim_end_matches('#'));
                let mut anchor = base.clone();
                let mut n = 0;
                while seen.contains(&anchor) {
                    n += 1;
                    anchor = format!("{base}-{n}");
                }
                seen.insert(anchor);
            }
            for attr in ["id=\"", "name=\""] {
                let mut rest = line;
                while let Some(at) = rest.find(attr) {
                    rest = &rest[at + attr.len()..];
                    if let Some(end) = rest.find('"') {
                        seen.insert(rest[..end].to_owned());
                    }
                }
            }
        }
        seen
    }

    /// Every broken relative link of `docs`, as `file:line: what is wrong`, paths shown
    /// from `root`.
    fn broken_links(root: &Path, docs: &[PathBuf]) -> Vec<String> {
        let shown = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
        let mut broken = Vec::new();
        for doc in docs {
            let text = match std::fs::read_to_string(doc) {
                Ok(text) => text,
                Err(e) => {
                    broken.push(format!("{}: cannot be read: {e}", shown(doc)));
                    continue;
                }
            };
            for (line, target) in links(&text) {
                if target.is_empty()
                    || target.contains("://")
                    || target.starts_with("mailto:")
                    || target.starts_with("//")
                {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((path, anchor)) => (path, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    doc.clone()
                } else if path.starts_with('/') {
                    root.join(path.trim_start_matches('/'))
                } else {
                    doc.parent().unwrap_or(root).join(path)
                };
                let at = format!("{}:{line}", shown(doc));
                if !file.exists() {
                    broken.push(format!("{at}: ({target}) names no file: {}", shown(&file)));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if file.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                let headings = std::fs::read_to_string(&file)
                    .map(|t| anchors(&t))
                    .unwrap_or_default();
                if !headings.contains(anchor) {
                    broken.push(format!(
                        "{at}: ({target}) names no heading of {}",
                        shown(&file)
                    ));
                }
            }
        }
        broken
    }

    #[test]
    fn every_link_between_the_documents_names_a_file_and_heading_that_exist() {
        let root = project_root();
        let docs = documents(&root);
        for name in ["README.md", "ARCHITECTURE.md"] {
            assert!(
                docs.contains(&root.join(name)),
                "{name} is not among the documents checked"
            );
        }
        assert!(
            docs.iter().any(|d| d.parent() == Some(&root.join("docs"))),
            "no document in docs/ was checked"
        );
        let broken = broken_links(&root, &docs);
        assert!(
            broken.is_empty(),
            "broken links in the documents:\n{}",
            broken.join("\n")
        );
    }

    #[test]
    fn architecture_is_a_map_of_at_most_350_lines() {
        let text = std::fs::read_to_string(project_root().join("ARCHITECTURE.md"))
            .expect("ARCHITECTURE.md");
        let lines = text.lines().count();
        assert!(
            lines <= ARCHITECTURE_MAX_LINES,
            "ARCHITECTURE.md has {lines} lines, over {ARCHITECTURE_MAX_LINES}: move the \
             detail into a document of its own under docs/, and link it"
        );
    }

    #[test]
    fn the_map_links_every_document_in_docs() {
        let root = project_root();
        let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
        let linked: HashSet<PathBuf> = links(&map)
            .into_iter()
            .map(|(_, target)| root.join(target.split('#').next().unwrap_or("")))
            .collect();
        let unlinked: Vec<String> = documents(&root)
            .into_iter()
            .filter(|d| d.parent() == Some(&root.join("docs")) && !linked.contains(d))
            .map(|d| d.strip_prefix(&root).unwrap_or(&d).display().to_string())
            .collect();
        assert!(
            unlinked.is_empty(),
            "ARCHITECTURE.md links no {unlinked:?}: a document in docs/ is found from the map"
        );
    }

    #[test]
    fn anchors_are_made_as_github_makes_them() {
        assert_eq!(slug("The SDK's size"), "the-sdks-size");
        assert_eq!(slug("The simulation (`sim`)"), "the-simulation-sim");
        assert_eq!(
            slug("Scaling past one database: Durable Objects"),
            "scaling-past-one-database-durable-objects"
        );
        assert_eq!(
            slug("Create ≥ 0.8× a bare insert: missed, and why"),
            "create--08-a-bare-insert-missed-and-why"
        );
        assert_eq!(
            slug("`protocol/` — the pure core"),
            "protocol--the-pure-core"
        );
        let text = "# A\n\n```sh\n# not a heading\n```\n\n## A\n### B_c #\n<a id=\"here\"></a>\n";
        let found = anchors(text);
        for anchor in ["a", "a-1", "b_c", "here"] {
            assert!(found.contains(anchor), "{anchor} in {found:?}");
        }
        assert!(!found.contains("not-a-heading"), "{found:?}");
    }

    #[test]
    fn links_in_code_are_not_links() {
        let text = "See [the map](ARCHITECTURE.md#codemap) and `[no](nowhere.md)`,\n\
                    ``a ` [no](x.md) ``, [split\ntext](docs/a.md \"title\").\n\
                    ```md\n[no](fenced.md)\n```\n[self](#top)\n";
        let found: Vec<String> = links(text).into_iter().map(|(_, t)| t).collect();
        assert_eq!(found, ["ARCHITECTURE.md#codemap", "docs/a.md", "#top"]);
        assert_eq!(links(text)[1].0, 3, "the line a link ends its text on");
    }

    #[test]
    fn a_missing_file_or_heading_is_reported() {
        let dir = std::env::temp_dir().join(format!("onceclick-doc-links-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("docs")).expect("a scratch folder");
        std::fs::write(dir.join("docs/a.md"), "# A page\n\n## Its part\n").expect("docs/a.md");
        std::fs::write(
            dir.join("README.md"),
            "# Top\n[ok](docs/a.md#its-part) [ok](#top) [ok](docs/)\n\
             [gone](docs/b.md) [no heading](docs/a.md#nothing) [no self](#bottom)\n\
             [web](https://example.com/x.md#y)\n",
        )
        .expect("README.md");
        let broken = broken_links(&dir, &documents(&dir));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(broken.len(), 3, "{broken:#?}");
        assert!(broken[0].starts_with("README.md:3: (docs/b.md) names no file"));
        assert!(broken[1].contains("(docs/a.md#nothing) names no heading of docs/a.md"));
        assert!(broken[2].contains("(#bottom) names no heading of README.md"));
    }
}
