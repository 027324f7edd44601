//! The npm page keeps up with the package: every name the published declarations
//! (`sdk/pkg/onceclick/onceclick.d.ts` and `react.d.ts`) export, and every member of
//! their exported interfaces and classes, must be documented in `sdk/README.md`.
//! `cargo xtask sdk` runs [`check`] on the package it has just built.
//!
//! A name is documented when the README shows it as code: inside an inline code span
//! (`` `onPartial` ``, or a longer one such as `` `wait(jobId, { onPartial })` ``) or as a
//! word of a fenced code block. Prose does not count.
//!
//! Plain string processing, no TypeScript parser: the declarations are cut into tokens
//! (comments dropped, string and template literals kept whole), the top level is read
//! for `export`s, and the body of each exported interface and class for its direct
//! members. Left out: wasm-bindgen's loader types (`InitInput`, `InitOutput`,
//! `SyncInitInput`, so also `InitOutput`'s raw wasm exports), private members, computed
//! ones (`[Symbol.dispose]`), `constructor`, `free` and names that begin with `__`.

use anyhow::{bail, Context, Result};
use std::collections::HashSet;
use std::path::Path;

/// The declaration files of the package, relative to the project root.
const DECLARATIONS: [&str; 2] = [
    "sdk/pkg/onceclick/onceclick.d.ts",
    "sdk/pkg/onceclick/react.d.ts",
];

/// The npm page, relative to the project root.
const README: &str = "sdk/README.md";

/// wasm-bindgen's loader types: what `init` takes and gives, not the SDK's API.
const LOADER_TYPES: [&str; 3] = ["InitInput", "InitOutput", "SyncInitInput"];

/// Fails, listing each one, if `sdk/README.md` leaves out a name the built package's
/// declarations publish.
pub(crate) fn check(root: &Path) -> Result<()> {
    let readme_path = root.join(README);
    let readme = std::fs::read_to_string(&readme_path)
        .with_context(|| format!("reading {}", readme_path.display()))?;
    let mut files = Vec::new();
    for name in DECLARATIONS {
        let path = root.join(name);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        files.push((name, text));
    }
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let missing = undocumented(&files, &readme)?;
    if !missing.is_empty() {
        bail!(
            "{README} does not document {} name(s) the package's declarations publish \
             (show each as code: in backticks or in a code block):\n  {}",
            missing.len(),
            missing.join("\n  ")
        );
    }
    Ok(())
}

/// A public name of the declarations: an export, or a member of an exported
/// interface or class (`owner`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Declared {
    name: String,
    owner: Option<String>,
}

impl std::fmt::Display for Declared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.owner {
            Some(owner) => write!(f, "{owner}.{}", self.name),
            None => write!(f, "{}", self.name),
        }
    }
}

/// Each name of `files` (`(file name, declarations)`) that `readme` does not document,
/// as `file: Owner.member` or `file: name`. An error if a file declares nothing: its
/// reading broke.
fn undocumented(files: &[(&str, &str)], readme: &str) -> Result<Vec<String>> {
    let documented = documented_words(readme);
    let mut missing = Vec::new();
    for (file, text) in files {
        let names = declared_names(text);
        if names.is_empty() {
            bail!("{file}: no exported name found: this reading of declarations no longer fits it");
        }
        let file_name = file.rsplit('/').next().unwrap_or(file);
        missing.extend(
            names
                .iter()
                .filter(|d| !documented.contains(&d.name))
                .map(|d| format!("{file_name}: {d}")),
        );
    }
    Ok(missing)
}

/// The words a Markdown text shows as code: those of its inline code spans and of its
/// fenced code blocks.
fn documented_words(markdown: &str) -> HashSet<String> {
    let mut words = HashSet::new();
    let mut fence: Option<String> = None;
    // Inline code spans do not cross a paragraph: the text is read a paragraph at a time.
    let mut paragraph = String::new();
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        let opens = marker.len() >= 3
            && (marker.bytes().all(|b| b == b'`') || marker.bytes().all(|b| b == b'~'));
        match &fence {
            Some(open) => {
                if opens
                    && marker.starts_with(open.as_str())
                    && trimmed[marker.len()..].trim().is_empty()
                {
                    fence = None;
                } else {
                    add_words(line, &mut words);
                }
                continue;
            }
            None if opens => {
                add_code_spans(&paragraph, &mut words);
                paragraph.clear();
                fence = Some(marker);
                continue;
            }
            None => {}
        }
        if trimmed.is_empty() {
            add_code_spans(&paragraph, &mut words);
            paragraph.clear();
        } else {
            paragraph.push_str(line);
            paragraph.push('\n');
        }
    }
    add_code_spans(&paragraph, &mut words);
    words
}

/// Adds the words of `paragraph`'s code spans: a run of backticks opens one, and the
/// next run of the same length closes it (an unmatched run is plain text).
fn add_code_spans(paragraph: &str, words: &mut HashSet<String>) {
    let bytes = paragraph.as_bytes();
    let run_at = |i: usize| bytes[i..].iter().take_while(|&&b| b == b'`').count();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let open = run_at(i);
        let start = i + open;
        let mut j = start;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let run = run_at(j);
                if run == open {
                    close = Some(j);
                    break;
                }
                j += run;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                add_words(&paragraph[start..end], words);
                i = end + open;
            }
            None => i = start,
        }
    }
}

/// Adds the identifiers of `code` (`$`, `_`, letters and digits).
fn add_words(code: &str, words: &mut HashSet<String>) {
    for word in code.split(|c: char| !is_word_char(c)) {
        if !word.is_empty() {
            words.insert(word.to_owned());
        }
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// What a token of the declarations is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An identifier or keyword (`#name` too), or a number.
    Word,
    /// A string or template literal, whole.
    Str,
    /// One punctuation character, or `=>`.
    Punct,
}

#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    kind: Kind,
    text: &'a str,
    /// Whether a line ended between the previous token and this one.
    newline: bool,
}

impl Token<'_> {
    fn is(&self, text: &str) -> bool {
        self.kind != Kind::Str && self.text == text
    }
}

/// The tokens of `text`, its comments (`//`, `/* */`) left out.
fn tokens(text: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    let mut newline = false;
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|&(_, n)| n);
        if c == '\n' {
            newline = true;
            continue;
        }
        if c.is_whitespace() {
            continue;
        }
        if c == '/' && next == Some('/') {
            for (_, c) in chars.by_ref() {
                if c == '\n' {
                    newline = true;
                    break;
                }
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            chars.next();
            let mut star = false;
            for (_, c) in chars.by_ref() {
                newline |= c == '\n';
                if star && c == '/' {
                    break;
                }
                star = c == '*';
            }
            continue;
        }
        let (kind, end) = if c == '"' || c == '\'' || c == '`' {
            // A literal, to its closing quote (a template's `${…}` stays inside it).
            let mut end = text.len();
            let mut escaped = false;
            for (j, d) in chars.by_ref() {
                if escaped {
                    escaped = false;
                } else if d == '\\' {
                    escaped = true;
                } else if d == c {
                    end = j + d.len_utf8();
                    break;
                }
            }
            (Kind::Str, end)
        } else if is_word_char(c) || c == '#' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !is_word_char(d) {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
            (Kind::Word, end)
        } else if c == '=' && next == Some('>') {
            chars.next();
            (Kind::Punct, i + 2)
        } else {
            (Kind::Punct, i + c.len_utf8())
        };
        out.push(Token {
            kind,
            text: &text[i..end],
            newline,
        });
        newline = false;
    }
    out
}

/// How much deeper `token` nests what follows: `{ ( [ <` open, `} ) ] >` close (in a
/// declaration file `<` and `>` are only ever a type's brackets; `=>` is one token).
fn nesting(token: &Token<'_>) -> i32 {
    if token.kind != Kind::Punct {
        return 0;
    }
    match token.text {
        "{" | "(" | "[" | "<" => 1,
        "}" | ")" | "]" | ">" => -1,
        _ => 0,
    }
}

/// The public names of a declaration file, in order, each once.
fn declared_names(text: &str) -> Vec<Declared> {
    let tokens = tokens(text);
    let mut names: Vec<Declared> = Vec::new();
    let mut add = |name: &str, owner: Option<&str>| {
        let d = Declared {
            name: name.to_owned(),
            owner: owner.map(str::to_owned),
        };
        if !names.contains(&d) {
            names.push(d);
        }
    };
    let word = |i: usize| {
        tokens
            .get(i)
            .filter(|t| t.kind == Kind::Word)
            .map(|t| t.text)
    };
    let mut depth = 0;
    for (i, token) in tokens.iter().enumerate() {
        let top = depth == 0;
        depth += nesting(token);
        if !top || !token.is("export") {
            continue;
        }
        let mut k = i + 1;
        // `export { A, B as C }` and `export type { D }`.
        if word(k) == Some("type") && tokens.get(k + 1).is_some_and(|t| t.is("{")) {
            k += 1;
        }
        if tokens.get(k).is_some_and(|t| t.is("{")) {
            let mut last = None;
            for t in &tokens[k + 1..] {
                if t.is("}") || t.is(",") {
                    if let Some(name) = last.take() {
                        add(name, None);
                    }
                    if t.is("}") {
                        break;
                    }
                } else if t.kind == Kind::Word && t.text != "type" && t.text != "as" {
                    last = Some(t.text);
                }
            }
            continue;
        }
        // `export default function …`: wasm-bindgen's loader, imported as `init`.
        if word(k) == Some("default") {
            if tokens[k + 1..]
                .iter()
                .take_while(|t| t.kind == Kind::Word)
                .any(|t| t.text == "function")
            {
                add("init", None);
            }
            continue;
        }
        while matches!(word(k), Some("declare" | "abstract" | "async")) {
            k += 1;
        }
        if word(k) == Some("const") && word(k + 1) == Some("enum") {
            k += 1;
        }
        let keyword = word(k);
        let Some(name) = word(k + 1) else {
            continue;
        };
        if !matches!(
            keyword,
            Some(
                "class"
                    | "interface"
                    | "type"
                    | "function"
                    | "const"
                    | "let"
                    | "var"
                    | "enum"
                    | "namespace"
            )
        ) || LOADER_TYPES.contains(&name)
        {
            continue;
        }
        add(name, None);
        if matches!(keyword, Some("class" | "interface")) {
            if let Some(body) = body_start(&tokens, k + 2) {
                for member in members(&tokens, body) {
                    add(member, Some(name));
                }
            }
        }
    }
    names
}

/// The index of the `{` that opens the body of the class or interface whose header
/// goes on at `from` (past its type parameters and `extends` clauses).
fn body_start(tokens: &[Token<'_>], from: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, t) in tokens.iter().enumerate().skip(from) {
        if depth == 0 && t.is("{") {
            return Some(i);
        }
        if depth == 0 && t.is(";") {
            return None;
        }
        depth += nesting(t);
    }
    None
}

/// Words that may come before a member's name without being it.
const MODIFIERS: [&str; 12] = [
    "readonly",
    "public",
    "private",
    "protected",
    "static",
    "abstract",
    "declare",
    "override",
    "accessor",
    "async",
    "get",
    "set",
];

/// Tokens after which a line goes on with the same type (so a word that begins the next
/// line is not a member).
const CONTINUES: [&str; 13] = [
    ":", "|", "&", "=>", "=", "?", ".", "extends", "keyof", "typeof", "infer", "is", "unique",
];

/// The names of the direct members of the body whose `{` is at `open`: properties and
/// methods, not those of the object types nested in them. Private, computed
/// (`[Symbol.dispose]`) and index members, `constructor`, `free` and `__…` are left out.
fn members<'a>(tokens: &[Token<'a>], open: usize) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut depth = 0;
    let mut at_start = true;
    let mut previous: Option<&Token<'_>> = None;
    let ends_name = |t: Option<&Token<'_>>| {
        t.is_some_and(|t| t.kind == Kind::Punct && matches!(t.text, "?" | ":" | "(" | "<" | "!"))
    };
    for (i, t) in tokens.iter().enumerate().skip(open + 1) {
        if depth == 0 {
            if t.is("}") {
                break;
            }
            let continued =
                previous.is_some_and(|p| p.kind != Kind::Str && CONTINUES.contains(&p.text));
            if at_start || (t.newline && !continued) {
                let mut k = i;
                let mut private = false;
                while tokens
                    .get(k)
                    .is_some_and(|m| m.kind == Kind::Word && MODIFIERS.contains(&m.text))
                    && !ends_name(tokens.get(k + 1))
                {
                    private |= matches!(tokens[k].text, "private" | "protected");
                    k += 1;
                }
                if let Some(name) = tokens.get(k).filter(|_| ends_name(tokens.get(k + 1))) {
                    let text = name.text.trim_matches(['"', '\'']);
                    let skipped = private
                        || name.kind == Kind::Punct
                        || text.starts_with('#')
                        || text.starts_with("__")
                        || matches!(text, "constructor" | "free")
                        || text.is_empty()
                        || !text.chars().all(is_word_char)
                        || text.starts_with(|c: char| c.is_ascii_digit());
                    if !skipped {
                        found.push(text);
                    }
                }
            }
            at_start = false;
        }
        depth += nesting(t);
        if depth == 0 && (t.is(";") || t.is(",")) {
            at_start = true;
        }
        previous = Some(t);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<String> {
        declared_names(text)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn missing(declarations: &str, readme: &str) -> Vec<String> {
        undocumented(&[("sdk/pkg/onceclick/x.d.ts", declarations)], readme).unwrap()
    }

    /// Declarations in the package's shapes, with what the check must leave out.
    const SAMPLE: &str = r#"
export type JobStatus = "queued" | "running";
export type ErrorCode =
  | "unauthorized"
  /** Only from the server build: `ghostCode`. */
  | `http_${number}`;
export interface Attempt {
  id: string; n: number;
  /** What its provider billed: { hidden: number } */
  tokens: { prompt: number; completion: number } | null;
}
export declare class Client {
  private constructor();
  private secret: string;
  /** Submits it: `fake(option)` */
  submit<K extends string>(kind: K, input: unknown, options?: { signal?: AbortSignal }): Promise<Job<K>>;
  wait(jobId: string): Promise<Job>;
  wait(jobId: string, options: WaitOptions): Promise<Job>;
  free(): void;
  [Symbol.dispose](): void;
}
export interface WaitOptions<K extends string = string> {
  // legacyOption: a line comment that names no member
  signal?: AbortSignal;
  onPartial?: (partial: Partial<K>) => void;
  firstEventMs?: number
  live?:
    boolean
  readonly retryable: boolean
}
declare const hidden: unique symbol;
export function idempotentFetch(url: string, init: RequestInit | undefined): Promise<Response>;
export type InitInput = RequestInfo | URL;
export interface InitOutput {
  readonly memory: WebAssembly.Memory;
  readonly client_new: (a: unknown) => [number, number, number];
  readonly __wbindgen_malloc: (a: number, b: number) => number;
}
export type SyncInitInput = BufferSource;
export function initSync(module: { module: SyncInitInput }): InitOutput;
export default function __wbg_init (module_or_path?: InitInput): Promise<InitOutput>;
"#;

    /// What the check finds in [`SAMPLE`], in order.
    const SAMPLE_NAMES: [&str; 18] = [
        "JobStatus",
        "ErrorCode",
        "Attempt",
        "Attempt.id",
        "Attempt.n",
        "Attempt.tokens",
        "Client",
        "Client.submit",
        "Client.wait",
        "WaitOptions",
        "WaitOptions.signal",
        "WaitOptions.onPartial",
        "WaitOptions.firstEventMs",
        "WaitOptions.live",
        "WaitOptions.retryable",
        "idempotentFetch",
        "initSync",
        "init",
    ];

    /// A README that documents every name of [`SAMPLE`], in each way there is.
    const FULL_README: &str = r#"# x

`init()` then `new Client(options)` and `initSync`: see `JobStatus`, ``ErrorCode``.

| method | |
|---|---|
| `submit(kind, input)` | `wait(jobId, { onPartial, signal })` |

Its `Attempt` has `id`, `n` and `tokens`; `idempotentFetch(url, init)`
goes on a second line: `WaitOptions` with
`live`.

```ts
await client.wait(job.id, { firstEventMs: 5000 });
if (e.retryable) retry();
```
"#;

    #[test]
    fn every_export_and_direct_member_is_found() {
        assert_eq!(names(SAMPLE), SAMPLE_NAMES);
    }

    #[test]
    fn comments_nested_members_loader_types_and_private_members_are_left_out() {
        let found = names(SAMPLE);
        for word in [
            "ghostCode",
            "hidden",
            "fake",
            "legacyOption",
            "prompt",
            "completion",
            "secret",
            "constructor",
            "free",
            "dispose",
            "Symbol",
            "InitInput",
            "InitOutput",
            "SyncInitInput",
            "memory",
            "client_new",
            "__wbindgen_malloc",
            "__wbg_init",
            "boolean",
        ] {
            assert!(
                !found.iter().any(|n| n.rsplit('.').next() == Some(word)),
                "{word} in {found:?}"
            );
        }
    }

    #[test]
    fn passes_when_everything_is_documented() {
        assert_eq!(missing(SAMPLE, FULL_README), Vec::<String>::new());
    }

    #[test]
    fn a_missing_member_is_named_with_its_owner() {
        let readme = FULL_README.replace("onPartial, ", "");
        assert_eq!(missing(SAMPLE, &readme), ["x.d.ts: WaitOptions.onPartial"]);
    }

    #[test]
    fn a_missing_export_is_named() {
        let readme = FULL_README
            .replace("`idempotentFetch(url, init)`", "idempotentFetch")
            .replace("`init()` then", "init() then");
        assert_eq!(
            missing(SAMPLE, &readme),
            ["x.d.ts: idempotentFetch", "x.d.ts: init"]
        );
    }

    #[test]
    fn prose_and_unclosed_backticks_do_not_document() {
        // In prose, or after a backtick that nothing closes in its paragraph, `live` is
        // just a word.
        let readme = FULL_README.replace("`live`.", "live.");
        assert_eq!(missing(SAMPLE, &readme), ["x.d.ts: WaitOptions.live"]);
        let readme = FULL_README.replace(
            "`WaitOptions` with\n`live`.",
            "`WaitOptions` with\n`live.\n\n`.",
        );
        assert_eq!(missing(SAMPLE, &readme), ["x.d.ts: WaitOptions.live"]);
    }

    #[test]
    fn a_word_in_a_fenced_block_documents_and_the_fence_is_closed() {
        let readme = FULL_README.replace("firstEventMs: 5000", "timeout: 5000");
        assert_eq!(
            missing(SAMPLE, &readme),
            ["x.d.ts: WaitOptions.firstEventMs"]
        );
        // After the fence closes, prose is prose again.
        let readme = format!("{readme}\nfirstEventMs\n");
        assert_eq!(
            missing(SAMPLE, &readme),
            ["x.d.ts: WaitOptions.firstEventMs"]
        );
    }

    #[test]
    fn export_lists_and_default_exports() {
        let text = "import type { Hidden } from \"./x.js\";\n\
                    export { A, B as C };\n\
                    export type { D } from \"./d.js\";\n\
                    export default function __wbg_init(): Promise<void>;\n\
                    export declare const version: string;\n\
                    export let counter: number;";
        assert_eq!(names(text), ["A", "C", "D", "init", "version", "counter"]);
    }

    #[test]
    fn a_hook_interface_with_generics_and_multi_line_members() {
        let text = r#"
import type { Job, OnceclickError } from "./onceclick.js";
/** @deprecated Use `OnceclickError`. */
export type SubmitError = OnceclickError;
export interface UseSubmit<K extends string = string> {
    /**
     * Never rejects: resolves to null when it failed (see `error`).
     */
    submit(input: unknown, options?: { signal?: AbortSignal }): Promise<Job<K> | null>;
    reset(): void;
    job: Job<K> | null;
    partial: { [P in keyof K]?: K[P] } | null;
}
export function useSubmit<K extends string>(
    client: unknown,
    kind: K,
): UseSubmit<K>;
"#;
        assert_eq!(
            names(text),
            [
                "SubmitError",
                "UseSubmit",
                "UseSubmit.submit",
                "UseSubmit.reset",
                "UseSubmit.job",
                "UseSubmit.partial",
                "useSubmit"
            ]
        );
    }

    #[test]
    fn a_file_with_no_export_is_an_error() {
        let e = undocumented(&[("a.d.ts", "declare const x: number;")], "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a.d.ts: no exported name"), "{e}");
    }

    /// The README against the package `cargo xtask sdk` last built, when there is one.
    #[test]
    fn the_shipped_readme_documents_the_built_declarations() {
        let root = crate::tools::project_root();
        let built = root.join(DECLARATIONS[0]);
        if !built.exists() {
            println!(
                "no {}: `cargo xtask sdk` has not built the package; skipped",
                built.display()
            );
            return;
        }
        let mut count = 0;
        for file in DECLARATIONS {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            let found = declared_names(&text);
            count += found.len();
            println!(
                "{file}: {} names: {}",
                found.len(),
                found
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        println!("{count} names in all");
        if let Err(e) = check(&root) {
            panic!("{e:#}");
        }
    }
}
