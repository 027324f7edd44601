//! What the live channel did in a world: the figures of its line in the report.

/// What the live channel did in a world.
#[derive(Clone, Copy, Debug, Default)]
pub struct LiveFigures {
    /// Notifications the store sent, and those lost on the way.
    pub told: u64,
    pub lost: u64,
    /// Streams opened, reopened from a position, and events they sent.
    pub opens: u64,
    pub reconnects: u64,
    pub events: u64,
    /// Re-reads of a hub, and restarts of one (its memory and sockets gone).
    pub rereads: u64,
    pub restarts: u64,
    /// Hand-offs of text to a hub, those that failed, and pieces streams sent.
    pub handed: u64,
    pub hand_failed: u64,
    pub pieces: u64,
    /// Hubs evicted between hand-offs (memory gone, sockets open).
    pub evictions: u64,
    /// Connections of calls to their hubs: opened, failed to open, and dropped under a
    /// call (cut, or closed by the hub's restart).
    pub connections: u64,
    pub open_failed: u64,
    pub dropped: u64,
    /// Chunks of text a hub wrote to its storage, and writes that failed.
    pub kept: u64,
    pub keep_failed: u64,
    /// Of those, the chunks written at an attempt's end (its `unknown` document).
    pub kept_at_end: u64,
    /// A hub's alarm for its kept text read its job (issue 42), and those reads that
    /// found the job settled or gone and deleted the text.
    pub kept_checks: u64,
    pub check_deleted: u64,
    /// Hand-offs the hub refused because the attempt had ended: the call then tells its
    /// dispatcher, which reads the store at once (`host::CallProgress::ended`).
    pub refused_ended: u64,
    /// Hand-offs the hub answered with no stream watching (the call's slow pace), and
    /// pokes it sent its calls (a stream subscribed, or a document came), and those
    /// that found the call with text to hand on (which must then go at once).
    pub alone: u64,
    pub pokes: u64,
    pub pokes_due: u64,
    /// Claims told their hub after their provider call began (`dispatch::call_and_record`
    /// tells it as the call's watch begins).
    pub calls_beside: u64,
}

impl LiveFigures {
    pub fn add(&mut self, o: &LiveFigures) {
        self.told += o.told;
        self.lost += o.lost;
        self.opens += o.opens;
        self.reconnects += o.reconnects;
        self.events += o.events;
        self.rereads += o.rereads;
        self.restarts += o.restarts;
        self.handed += o.handed;
        self.hand_failed += o.hand_failed;
        self.pieces += o.pieces;
        self.evictions += o.evictions;
        self.connections += o.connections;
        self.open_failed += o.open_failed;
        self.dropped += o.dropped;
        self.kept += o.kept;
        self.keep_failed += o.keep_failed;
        self.kept_at_end += o.kept_at_end;
        self.kept_checks += o.kept_checks;
        self.check_deleted += o.check_deleted;
        self.refused_ended += o.refused_ended;
        self.alone += o.alone;
        self.pokes += o.pokes;
        self.pokes_due += o.pokes_due;
        self.calls_beside += o.calls_beside;
    }
}
