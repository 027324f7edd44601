//! A Server-Sent Events reader for the live job stream (`GET /v1/jobs/{id}/stream`),
//! parsing the wire as the WHATWG spec reads it: `field: value` lines, a blank line
//! ending an event, `:` lines as comments.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::client::Api;
use std::time::Duration;

/// One thing a stream sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// An event: its id, its type, its data (lines joined by `\n`).
    Event {
        id: Option<String>,
        event: String,
        data: String,
    },
    /// A comment line's text (after the colon).
    Comment(String),
}

/// An open stream.
pub struct Stream {
    response: reqwest::Response,
    /// Bytes not yet read into an event: a chunk may end inside a character.
    buffer: Vec<u8>,
    pending: Vec<Item>,
}

/// What opening a stream answered: its status and headers, and the stream if 200.
pub struct Opened {
    pub status: u16,
    pub content_type: Option<String>,
    pub cache_control: Option<String>,
    pub body: Option<String>,
    pub stream: Option<Stream>,
}

/// Opens the stream of job `id`, with `Last-Event-ID` if given.
pub async fn open(api: &Api, token: Option<&str>, id: &str, last: Option<&str>) -> Opened {
    open_path(api, token, &format!("/v1/jobs/{id}/stream"), last).await
}

/// Opens the stream of job `id` as [`open`] does, and returns it: panics unless it
/// answered 200 with a stream.
pub async fn follow(api: &Api, token: Option<&str>, id: &str, last: Option<&str>) -> Stream {
    let opened = open(api, token, id, last).await;
    let status = opened.status;
    opened
        .stream
        .unwrap_or_else(|| panic!("the stream of {id} answered {status}: {:?}", opened.body))
}

/// Opens `GET /v1/stream` for `jobs`, each with the position the client has, if any
/// (`job=ID:POSITION`).
pub async fn open_many(api: &Api, token: Option<&str>, jobs: &[(&str, Option<&str>)]) -> Opened {
    let query: Vec<String> = jobs
        .iter()
        .map(|(id, at)| match at {
            Some(at) => format!("job={id}:{at}"),
            None => format!("job={id}"),
        })
        .collect();
    open_path(api, token, &format!("/v1/stream?{}", query.join("&")), None).await
}

/// Opens the stream at `path`, with `Last-Event-ID` if given.
pub async fn open_path(api: &Api, token: Option<&str>, path: &str, last: Option<&str>) -> Opened {
    let headers: Vec<_> = last
        .map(|last| ("Last-Event-ID", last))
        .into_iter()
        .collect();
    open_with(api, token, path, &headers).await
}

/// Opens the stream at `path` with these request headers.
pub async fn open_with(
    api: &Api,
    token: Option<&str>,
    path: &str,
    headers: &[(&str, &str)],
) -> Opened {
    let mut rb = api.request(reqwest::Method::GET, path, token);
    for (name, value) in headers {
        rb = rb.header(*name, *value);
    }
    let response = rb.send().await.expect("the stream request was sent");
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (content_type, cache_control) = (header("content-type"), header("cache-control"));
    if status != 200 {
        let body = response.text().await.ok();
        return Opened {
            status,
            content_type,
            cache_control,
            body,
            stream: None,
        };
    }
    Opened {
        status,
        content_type,
        cache_control,
        body: None,
        stream: Some(Stream {
            response,
            buffer: Vec::new(),
            pending: Vec::new(),
        }),
    }
}

/// The change an event's id names: its `SEQ`, before any count of text or of ended
/// attempts (`9/~1/2:40`). Panics on an id that is not a position.
pub fn seq(id: &str) -> u64 {
    let seq = id.split('/').next().unwrap_or_default();
    seq.parse()
        .unwrap_or_else(|_| panic!("the id {id:?} is no position"))
}

impl Stream {
    /// The next item, or `None` once the server ended the stream. Panics after 20 s of
    /// silence (the server sends a comment at least every 15 s).
    pub async fn next(&mut self) -> Option<Item> {
        loop {
            if !self.pending.is_empty() {
                return Some(self.pending.remove(0));
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.response.chunk())
                .await
                .expect("the stream stayed silent for 20 s")
                .expect("the stream broke");
            let chunk = chunk?;
            self.buffer.extend_from_slice(&chunk);
            while let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                self.pending
                    .extend(parse(&String::from_utf8(block).expect("UTF-8")));
            }
        }
    }

    /// The next event of any type, skipping comments: its id, type and data as JSON;
    /// `None` at the stream's end.
    pub async fn next_typed(&mut self) -> Option<(String, String, serde_json::Value)> {
        loop {
            match self.next().await? {
                Item::Comment(_) => continue,
                Item::Event { id, event, data } => {
                    let id = id.expect("every event has an id");
                    return Some((id, event, serde_json::from_str(&data).unwrap()));
                }
            }
        }
    }

    /// The next `job` event, skipping comments and a streaming provider's `delta`s;
    /// `None` at the stream's end.
    pub async fn next_event(&mut self) -> Option<(String, serde_json::Value)> {
        loop {
            match self.next().await? {
                Item::Comment(_) => continue,
                Item::Event { event, .. } if event == "delta" => continue,
                Item::Event { id, event, data } => {
                    assert_eq!(event, "job", "an event type this test does not know");
                    return Some((
                        id.expect("every event has an id"),
                        serde_json::from_str(&data).unwrap(),
                    ));
                }
            }
        }
    }
}

fn parse(block: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let (mut id, mut event, mut data) = (None, None::<String>, Vec::<String>::new());
    for line in block.lines() {
        if let Some(comment) = line.strip_prefix(':') {
            items.push(Item::Comment(comment.trim().to_owned()));
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
        match field {
            "id" => id = Some(value),
            "event" => event = Some(value),
            "data" => data.push(value),
            _ => {}
        }
    }
    if !data.is_empty() {
        items.push(Item::Event {
            id,
            event: event.unwrap_or_else(|| "message".to_owned()),
            data: data.join("\n"),
        });
    }
    items
}
