use super::*;

#[test]
fn a_hub_sends_only_what_is_newer_than_all_it_heard() {
    let mut hub = Hub::default();
    assert_eq!(hub.catch_up(0), None);
    assert!(hub.offer(3, "three"));
    assert!(!hub.offer(2, "two"), "older: dropped");
    assert!(!hub.offer(3, "three again"), "the same change: dropped");
    assert_eq!(hub.catch_up(2), Some((3, "three")));
    assert_eq!(hub.catch_up(3), None);
    assert!(hub.offer(5, "five"));
    assert_eq!(hub.catch_up(0), Some((5, "five")));
}

#[test]
fn a_follower_takes_each_change_once_in_order() {
    let mut f = Follower::after(None);
    assert!(f.take(1));
    assert!(!f.take(1));
    assert!(f.take(4));
    assert!(!f.take(2), "older after newer");
    let mut resumed = Follower::after(Some(Place::at(4)));
    assert!(!resumed.take(4), "the client has it");
    assert!(resumed.take(5));
    assert_eq!(resumed.at, Some(5));
}

#[test]
fn a_position_is_plain_decimal() {
    assert_eq!(Position::parse("0"), Some(Position(0)));
    assert_eq!(Position::parse("7"), Some(Position(7)));
    assert_eq!(
        Position::parse("18446744073709551615"),
        Some(Position(u64::MAX))
    );
    for bad in [
        "",
        " 7",
        "7 ",
        "+7",
        "-7",
        "07",
        "7.0",
        "0x7",
        "18446744073709551616",
        "١",
    ] {
        assert_eq!(Position::parse(bad), None, "{bad:?}");
    }
    assert_eq!(Position::of_etag("\"12\""), Some(Position(12)));
    assert_eq!(Position::of_etag("12"), None);
    assert_eq!(Position::of_etag("W/\"12\""), None);
}

#[test]
fn a_place_is_a_position_and_each_attempts_text_in_code_points() {
    let place = Place::parse("7/1:1024/3:40").unwrap();
    assert_eq!(place.seq, 7);
    assert_eq!(
        (place.chars(1), place.chars(2), place.chars(3)),
        (1024, 0, 40)
    );
    assert_eq!(place.to_string(), "7/1:1024/3:40");
    assert_eq!(Place::parse("7"), Some(Place::at(7)));
    assert_eq!(Place::at(7).to_string(), "7");
    let most = (1..=MAX_TEXTS)
        .map(|n| format!("/{n}:1"))
        .collect::<String>();
    assert!(Place::parse(&format!("1{most}")).is_some());
    for bad in [
        "",
        "7/",
        "/1:2",
        "7/1",
        "7/1:0",
        "7/0:3",
        "7/2:1/1:1",
        "7/1:1/1:2",
        "7/1:01",
        "7/1:-1",
        "7/4294967296:1",
        &format!("1{most}/99:1"),
    ] {
        assert_eq!(Place::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn a_place_carries_the_attempts_its_holder_saw_end() {
    let place = Place::parse("9/~1-2/3:40/~5").unwrap();
    assert_eq!(place.ended, vec![(1, 2), (5, 5)]);
    assert!(place.is_ended(2) && !place.is_ended(3) && !place.is_ended(4));
    assert_eq!(place.to_string(), "9/~1-2/3:40/~5");
    let mut place = Place::parse("4/1:7/2:3").unwrap();
    assert!(place.end(2));
    assert_eq!(place.to_string(), "4/1:7/~2", "its count goes");
    assert_eq!(place.take(2, 3, "more"), Ok(None), "no more of its text");
    assert!(place.end(4) && place.end(3));
    assert_eq!(place.to_string(), "4/1:7/~2-4", "runs join");
    assert!(place.end(1));
    assert_eq!(place.to_string(), "4/~1-4");
    assert_eq!(Place::parse(&place.to_string()), Some(place.clone()));
    let mut top = Place::at(1);
    assert!(top.end(u32::MAX) && top.end(u32::MAX - 1));
    assert_eq!(top.to_string(), format!("1/~{}-{}", u32::MAX - 1, u32::MAX));

    // A place of `MAX_TEXTS` parts ends an attempt only where no part is added.
    let mut full = Place::at(1);
    for n in (1..=MAX_TEXTS as u32).map(|n| n * 2) {
        assert!(full.end(n));
    }
    assert!(!full.end(99), "a 17th part");
    assert!(full.end(3), "joins two runs: one part fewer");
    assert!(full.end(99));
    assert!(Place::parse(&full.to_string()).is_some());
    for bad in [
        "9/~",
        "9/~0",
        "9/~2-1",
        "9/~2-2",
        "9/~1-",
        "9/~-1",
        "9/~1/~2",
        "9/~1-3/2:5",
        "9/2:5/~2",
        "9/~3/1:5",
    ] {
        assert_eq!(Place::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn a_stream_resumed_from_its_place_sends_nothing_of_an_attempt_it_saw_end() {
    let doc = |state: &str| {
        serde_json::json!({"id": "job_1", "kind": "summarize", "status": "failed",
            "version": 1, "input": {}, "provider": "p", "result": null,
            "completed_by": null, "created_at": "t", "updated_at": "t",
            "attempts": [{"id": "att_1", "n": 1, "provider": "p", "state": state,
                "started_at": "t", "finished_at": null, "error": null}]})
    };
    let mut hub = Hub::default();
    hub.text(1, "att_1", 0, "partial", 100).unwrap();
    // The client read the failed job (the hub never heard of it) without its text.
    let failed: Job = serde_json::from_value(doc("abandoned")).unwrap();
    let mut first = Follower::after(None);
    assert!(first.take_job(5, &failed));
    assert_eq!(first.place().to_string(), "5/~1");
    // A fallback revives the job; the client resumes from its place.
    let place = Place::parse(&first.place().to_string()).unwrap();
    assert_eq!(hub.text_after(&place).count(), 0, "the hub holds it back");
    let mut resumed = Follower::after(Some(place));
    let piece = hub.text_after(&Place::at(0)).next().unwrap();
    assert_eq!(
        resumed.take_text(&piece),
        Ok(None),
        "and so does the stream"
    );
    let running: Job = serde_json::from_value(doc("running")).unwrap();
    let mut earlier = Follower::after(Some(Place::at(2)));
    earlier.take_job(2, &running);
    assert_eq!(earlier.take_text(&piece), Ok(Some((0, "partial"))));
}

#[test]
fn a_place_takes_only_the_text_it_lacks() {
    let mut place = Place::at(3);
    assert_eq!(place.take(2, 0, "Café"), Ok(Some((0, "Café"))));
    assert_eq!(place.take(2, 2, "fé 😀"), Ok(Some((4, " 😀"))), "overlap");
    assert_eq!(place.take(2, 0, "Ca"), Ok(None), "had it");
    assert_eq!(place.take(2, 9, "x"), Err(6), "a gap");
    assert_eq!(place.take(1, 0, "a"), Ok(Some((0, "a"))));
    assert_eq!(place.to_string(), "3/1:1/2:6");
    assert_eq!(after_chars("😀ab", 1), "ab");
    assert_eq!(after_chars("ab", 5), "");
}

#[test]
fn a_hub_keeps_each_attempts_text_and_catches_a_stream_up() {
    let mut hub = Hub::default();
    let piece = hub.text(1, "att_a", 0, "{\"sum", 100).unwrap().unwrap();
    assert_eq!(
        (piece.offset, piece.text, piece.attempt_id),
        (0, "{\"sum", "att_a")
    );
    assert_eq!(
        hub.text(1, "att_a", 9, "x", 100),
        Err(Refused::Gap(5)),
        "a gap: send from 5"
    );
    assert_eq!(
        hub.text(1, "att_a", 3, "um\": \"", 100)
            .unwrap()
            .unwrap()
            .text,
        "\": \""
    );
    assert_eq!(hub.text(1, "att_a", 0, "{\"s", 100), Ok(None));
    assert_eq!(
        hub.text(1, "att_a", 8, &"x".repeat(93), 100),
        Err(Refused::Gap(9)),
        "too long"
    );
    hub.text(2, "att_b", 0, "ab", 100).unwrap();
    let all: Vec<_> = hub
        .text_after(&Place::at(0))
        .map(|p| (p.n, p.offset, p.text.to_owned()))
        .collect();
    assert_eq!(
        all,
        [(1, 0, "{\"sum\": \"".to_owned()), (2, 0, "ab".to_owned())]
    );
    let rest: Vec<_> = hub
        .text_after(&Place::parse("4/1:8/2:2").unwrap())
        .map(|p| (p.n, p.offset, p.text.to_owned()))
        .collect();
    assert_eq!(rest, [(1, 8, "\"".to_owned())]);
    // A client ahead of the hub (its text was lost) is sent nothing it has.
    assert_eq!(
        hub.text_after(&Place::parse("4/1:50").unwrap())
            .filter(|p| p.n == 1)
            .count(),
        0
    );
    hub.drop_text();
    assert_eq!(hub.text_after(&Place::at(0)).count(), 0);
    assert_eq!(hub.chars(1), 0);
}

/// A document of job `job_1` in `status`, with attempts 1 and 2 in `first` and
/// `second`.
fn doc(status: &str, first: &str, second: &str) -> String {
    let attempt = |n: u32, state: &str| {
        serde_json::json!({"id": format!("att_{n}"), "n": n, "provider": "p",
            "state": state, "started_at": "t", "finished_at": null, "error": null})
    };
    serde_json::json!({"id": "job_1", "kind": "summarize", "status": status,
        "version": 1, "input": {}, "provider": "p", "result": null,
        "completed_by": null, "created_at": "t", "updated_at": "t",
        "attempts": [attempt(1, first), attempt(2, second)]})
    .to_string()
}

#[test]
fn a_hub_refuses_an_ended_attempts_text_and_drops_a_settled_jobs() {
    let mut hub = Hub::default();
    assert!(hub.offer(2, &doc("running", "running", "running")));
    hub.text(1, "att_1", 0, "ab", 100).unwrap();
    hub.text(2, "att_2", 0, "cd", 100).unwrap();
    assert!(hub.offer(5, &doc("succeeded", "succeeded", "running")));
    assert_eq!(hub.text(1, "att_1", 2, "x", 100), Err(Refused::Ended));
    assert_eq!(hub.chars(2), 2, "the loser still runs: its text stays");
    assert!(hub.text(2, "att_2", 2, "e", 100).unwrap().is_some());
    assert!(hub.offer(6, &doc("succeeded", "succeeded", "superseded")));
    assert_eq!(hub.text_after(&Place::at(0)).count(), 0, "settled: dropped");
    assert_eq!(hub.text(2, "att_2", 3, "f", 100), Err(Refused::Ended));

    // A settled job's `unknown` loser streams no more either: its late hand-off
    // would start again from 0 and outlive the job. An attempt added later may.
    let mut hub = Hub::default();
    assert!(hub.offer(2, &doc("succeeded", "succeeded", "unknown")));
    assert_eq!(hub.text(2, "att_2", 0, "late", 100), Err(Refused::Ended));
    assert!(hub.text(3, "att_3", 0, "new", 100).unwrap().is_some());
    let mut hub = Hub::default();
    assert!(hub.offer(2, &doc("unknown", "unknown", "running")));
    assert!(hub.text(1, "att_1", 0, "may win", 100).unwrap().is_some());
}

#[test]
fn a_piece_cuts_into_parts_between_code_points() {
    let piece = Piece {
        n: 2,
        attempt_id: "att",
        offset: 10,
        text: "aé😀bc",
    };
    let parts: Vec<_> = piece.parts(2).map(|p| (p.offset, p.text)).collect();
    assert_eq!(parts, [(10, "aé"), (12, "😀b"), (14, "c")]);
    assert_eq!(piece.parts(FRAME_CHARS).count(), 1);
    assert!(piece.parts(0).all(|p| p.text.chars().count() == 1));
}

#[test]
fn a_keeper_writes_a_chunk_a_kilobyte_and_reads_them_back_in_order() {
    let k = KEEP_EVERY_CHARS;
    let (mut keeper, mut hub) = (Keeper::default(), Hub::default());
    // The hub's text of attempt `n` grown to `chars` code points; the chunks due then
    // (here never more than one), as (key, chars).
    let mut due = |keeper: &mut Keeper, n: u32, chars: u64| {
        let have = hub.chars(n);
        let more = "a".repeat((chars - have) as usize);
        hub.text(n, &format!("att_{n}"), have, &more, 1 << 20)
            .unwrap();
        let chunks = keeper.due(&hub, n);
        assert!(chunks.len() <= 1, "{chunks:?}");
        chunks.into_iter().next().map(|c| (c.key, c.chars))
    };
    assert_eq!(due(&mut keeper, 1, k - 1), None);
    assert_eq!(due(&mut keeper, 1, k), Some((Keeper::key(1, 0), k)));
    keeper.wrote(1, k);
    assert_eq!(due(&mut keeper, 1, 2 * k - 1), None);
    assert_eq!(
        due(&mut keeper, 1, 2 * k + 5),
        Some((Keeper::key(1, k), 2 * k + 5)),
        "from where the last ended"
    );
    // That write failed: tried again a kilobyte later, from the same offset.
    assert_eq!(due(&mut keeper, 1, 2 * k + 6), None, "not on every piece");
    assert_eq!(
        due(&mut keeper, 1, 3 * k + 5),
        Some((Keeper::key(1, k), 3 * k + 5))
    );
    keeper.wrote(1, 3 * k + 5);
    assert_eq!(
        due(&mut keeper, 2, k),
        Some((Keeper::key(2, 0), k)),
        "each attempt on its own"
    );
    assert!(keeper.settle(), "something was written");
    assert!(!keeper.settle(), "nothing since");
    assert_eq!(
        due(&mut keeper, 1, 3 * k + 5),
        Some((Keeper::key(1, 0), 3 * k + 5)),
        "forgotten"
    );

    // A fresh instance reads the chunks back, in order whatever order they are
    // listed in, up to a gap; one that is not a chunk is skipped.
    let (a, b, c) = ("é".repeat(4), "b".repeat(3), "c".repeat(2));
    let entries = vec![
        (Keeper::key(1, 4), format!("att_1\n{b}")),
        (Keeper::key(1, 0), format!("att_1\n{a}")),
        (Keeper::key(1, 9), format!("att_1\n{c}")),
        (Keeper::key(2, 0), "att_2\nxy".to_owned()),
        ("text/x/0".to_owned(), "att_9\nz".to_owned()),
        (Keeper::key(3, 0), "no newline".to_owned()),
    ];
    let (mut fresh, mut hub) = (Keeper::default(), Hub::default());
    assert!(fresh.to_load());
    fresh.load(&mut hub, entries, 100);
    assert!(!fresh.to_load());
    assert_eq!(
        hub.text_of(1),
        Some(format!("{a}{b}").as_str()),
        "up to the gap at 7"
    );
    assert_eq!(hub.text_of(2), Some("xy"));
    assert_eq!(hub.text_of(3), None);
    let more = "d".repeat(k as usize - 1);
    hub.text(1, "att_1", 7, &more, 100 + k).unwrap();
    assert!(fresh.due(&hub, 1).is_empty(), "tried as far as read back");
    hub.text(1, "att_1", 7 + k - 1, "d", 100 + k).unwrap();
    let chunks = fresh.due(&hub, 1);
    assert_eq!(
        chunks
            .iter()
            .map(|c| (c.key.as_str(), c.chars))
            .collect::<Vec<_>>(),
        [(Keeper::key(1, 7).as_str(), 7 + k)]
    );
    // An instance that never read its storage back empties it when the job settles.
    assert!(Keeper::default().settle());
    let mut empty = Keeper::default();
    empty.load(&mut Hub::default(), Vec::new(), 100);
    assert!(!empty.settle(), "read back, nothing there");
}

#[test]
fn a_keeper_keeps_an_unknown_attempts_whole_text_once() {
    let (mut hub, mut keeper) = (Hub::default(), Keeper::every(4));
    assert!(hub.offer(2, &doc("running", "running", "running")));
    hub.text(1, "att_1", 0, "abcdé😀", 100).unwrap();
    hub.text(2, "att_2", 0, "xy", 100).unwrap();
    // A kilobyte (here 4 code points) was written while it streamed.
    let chunks = keeper.due(&hub, 1);
    assert_eq!(
        chunks,
        [EndChunk {
            n: 1,
            chars: 6,
            key: Keeper::key(1, 0),
            value: "att_1\nabcdé😀".to_owned(),
        }]
    );
    keeper.wrote(1, 6);
    hub.text(1, "att_1", 6, "fg", 100).unwrap();
    assert!(keeper.at_unknown(&hub).is_empty(), "nothing unknown yet");
    // Attempt 1 went unknown: the rest of its text, from its last write; attempt 2
    // still runs and keeps its pace.
    assert!(hub.offer(3, &doc("unknown", "unknown", "running")));
    let chunks = keeper.at_unknown(&hub);
    assert_eq!(
        chunks,
        [EndChunk {
            n: 1,
            chars: 8,
            key: Keeper::key(1, 6),
            value: "att_1\nfg".to_owned(),
        }]
    );
    keeper.wrote(1, 8);
    assert!(keeper.at_unknown(&hub).is_empty(), "once");
    // Its call still read a piece (it may yet win): kept at the next document.
    hub.text(1, "att_1", 8, "h", 100).unwrap();
    assert!(hub.offer(4, &doc("unknown", "unknown", "failed")));
    let chunks = keeper.at_unknown(&hub);
    assert_eq!(chunks.len(), 1);
    assert_eq!(
        (chunks[0].key.as_str(), chunks[0].value.as_str()),
        ("text/1/8", "att_1\nh")
    );
    // A failed write is given again at the next call (the next document or piece).
    assert_eq!(keeper.at_unknown(&hub), chunks);
    // A fresh hub reads the whole text back from the three chunks.
    let entries = vec![
        (Keeper::key(1, 0), "att_1\nabcdé😀".to_owned()),
        (Keeper::key(1, 6), "att_1\nfg".to_owned()),
        (chunks[0].key.clone(), chunks[0].value.clone()),
    ];
    let (mut fresh, mut back) = (Keeper::default(), Hub::default());
    fresh.load(&mut back, entries, 100);
    assert_eq!(back.text_of(1), Some("abcdé😀fgh"));
    // A settled job keeps nothing, its unknown attempt's included.
    assert!(hub.offer(5, &doc("cancelled", "unknown", "failed")));
    assert!(keeper.at_unknown(&hub).is_empty());
}

#[test]
fn a_keeper_keeps_a_long_text_in_chunks_that_storage_takes_whatever_failed_before() {
    // The longest text a hub takes, in characters of 2 to 4 bytes (3.4 MiB): one
    // chunk of all of it, or of all since a write that failed, storage would refuse.
    let id = "att_0192f0c4-7b1e-7c3d-9a4b-0123456789ab";
    let max = crate::chat::MAX_CHARS;
    let whole: String = "😀😀😀会é".chars().cycle().take(max as usize).collect();
    assert!(whole.len() > 3 << 20);
    let (mut hub, mut keeper) = (Hub::default(), Keeper::default());
    assert!(hub.offer(2, &doc("running", "running", "running")));
    let mut storage = std::collections::BTreeMap::new();
    // Writes each chunk, in order, unless `fails(i)` says its write fails. Each fits
    // the bound, and its key names where it begins.
    let mut keep = |keeper: &mut Keeper, chunks: Vec<EndChunk>, fails: &dyn Fn(usize) -> bool| {
        for (i, chunk) in chunks.into_iter().enumerate() {
            let (key, value) = (&chunk.key, &chunk.value);
            let bytes = key.len() + value.len();
            assert!(bytes <= KEEP_MAX_BYTES, "{key}: {bytes} bytes");
            let text = value.strip_prefix(&format!("{id}\n")).unwrap();
            let from = chunk.chars - text.chars().count() as u64;
            assert_eq!(*key, Keeper::key(1, from), "named where it begins");
            if !fails(i) {
                storage.insert(chunk.key.clone(), chunk.value.clone());
                keeper.wrote(chunk.n, chunk.chars);
            }
        }
    };
    let (piece, mut at, mut most) = (1 << 16, 0, 0);
    while at < max {
        let text = after_chars(&whole, at);
        let cut = text
            .char_indices()
            .nth(piece)
            .map_or(text.len(), |(i, _)| i);
        hub.text(1, id, at, &text[..cut], max).unwrap();
        at = hub.chars(1);
        let chunks = keeper.due(&hub, 1);
        most = most.max(chunks.len());
        // Every write fails until the text is past 2 MB (11 pieces, 2.4 MB); then,
        // of that call's chunks, the second fails and the others are written; then
        // every write fails again.
        let round = at / piece as u64;
        keep(&mut keeper, chunks, &|i| round != 11 || i == 1);
    }
    assert!(most > 4, "a call gave {most} chunks at most");
    // The attempt goes `unknown`: the rest of its text, in chunks, failing once.
    assert!(hub.offer(3, &doc("unknown", "unknown", "running")));
    let chunks = keeper.at_unknown(&hub);
    assert!(chunks.len() > 1, "{} chunks", chunks.len());
    keep(&mut keeper, chunks, &|_| true);
    let chunks = keeper.at_unknown(&hub);
    keep(&mut keeper, chunks, &|_| false);
    assert!(keeper.at_unknown(&hub).is_empty(), "all of it kept");

    let entries = storage.into_iter().collect();
    let (mut fresh, mut back) = (Keeper::default(), Hub::default());
    fresh.load(&mut back, entries, max);
    assert_eq!(back.chars(1), max, "the whole text is read back");
    assert!(back.text_of(1) == Some(whole.as_str()));
}

#[test]
fn a_followed_job_is_its_id_and_maybe_its_position() {
    assert_eq!(parse_followed("job_1"), Some(("job_1", None)));
    assert_eq!(
        parse_followed("job_1:17"),
        Some(("job_1", Some(Place::at(17))))
    );
    assert_eq!(
        parse_followed("job_1:0"),
        Some(("job_1", Some(Place::at(0))))
    );
    assert_eq!(
        parse_followed("job_1:7/2:40"),
        Some(("job_1", Place::parse("7/2:40")))
    );
    for bad in [
        "",
        ":7",
        "job_1:",
        "job_1:07",
        "job_1:x",
        "job_1:7:8",
        "job_1:7/2",
    ] {
        assert_eq!(parse_followed(bad), None, "{bad:?}");
    }
}

#[test]
fn a_stream_ends_only_when_nothing_is_in_flight() {
    use AttemptState as A;
    use JobStatus as J;
    assert!(settled(J::Succeeded, [A::Succeeded].into_iter()));
    assert!(settled(
        J::Succeeded,
        [A::Succeeded, A::Superseded].into_iter()
    ));
    assert!(!settled(
        J::Succeeded,
        [A::Succeeded, A::Running].into_iter()
    ));
    assert!(!settled(
        J::Succeeded,
        [A::Starting, A::Succeeded].into_iter()
    ));
    assert!(settled(J::Cancelled, [A::Cancelled].into_iter()));
    assert!(settled(J::Failed, [A::Failed].into_iter()));
    assert!(!settled(J::Failed, [A::Failed, A::Starting].into_iter()));
    for open in [J::Queued, J::Running, J::Unknown] {
        assert!(!settled(open, [A::Failed].into_iter()), "{open:?}");
    }
}
