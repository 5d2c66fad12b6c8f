//! ps-lda's workers joining and leaving a running job: at a clock boundary each worker takes
//! its documents by rank among the current workers ([`share_of`]); a moved document
//! restarts (see `crate::core::lda` `moves`), so the word-topic table stays the sum of the
//! current assignments.

use super::*;

impl PsLda {
    /// A worker of a standby node admitted at `clock`: it starts in that clock's pass and
    /// part (past the last one, with no documents), adds its documents' fresh counts, and
    /// reports the pass before its first as
    /// holding none of the documents (so that pass's curve point does not wait for it).
    pub(super) fn join(
        &self,
        st: &mut PsLdaWorkerState,
        ctx: &WorkerCtx<'_, PsLdaReport>,
        clock: u64,
    ) -> Result<(), PsError> {
        let parts = u64::from(self.cfg.clocks_per_iteration.max(1));
        let done = clock.saturating_sub(1);
        st.p.started = true;
        st.p.iteration = (done / parts) as usize + 1;
        st.p.part = (done % parts) as usize;
        if st.p.iteration > self.cfg.iterations {
            // Past the last pass: its counts would never be flushed, so it holds nothing
            // (the pending initial counts cancel out).
            st.core.retake(Vec::new())?;
        }
        for (row, delta) in st.core.take_initial_deltas() {
            ctx.client.batch_inc(WORD_TOPIC, row, &delta)?;
        }
        let report = PsLdaIteration {
            worker: ctx.worker(),
            iteration: st.p.iteration - 1,
            clock,
            doc_loglik: 0.0,
            tokens: 0,
            sampling_s: 0.0,
        };
        ctx.report(PsLdaReport::Iteration(report))?;
        tracing::info!(
            worker = ctx.worker(),
            clock,
            iteration = st.p.iteration,
            documents = st.core.doc_ids().len(),
            "ps-lda worker joined"
        );
        Ok(())
    }

    /// Takes the worker's share again when the current workers changed; `true` if it did
    /// (its count changes are pending in the client).
    pub(super) fn follow_members(
        &self,
        st: &mut PsLdaWorkerState,
        ctx: &WorkerCtx<'_, PsLdaReport>,
    ) -> Result<bool, PsError> {
        let members = ctx.current_workers();
        if members == st.members {
            return Ok(false);
        }
        let docs = share_of(&self.corpus, &members, ctx.worker());
        st.members = members;
        self.retake(st, ctx, docs)?;
        Ok(true)
    }

    /// Makes `docs` the worker's documents and sends the count changes.
    pub(super) fn retake(
        &self,
        st: &mut PsLdaWorkerState,
        ctx: &WorkerCtx<'_, PsLdaReport>,
        docs: Vec<(u32, Vec<u32>)>,
    ) -> Result<(), PsError> {
        let r = st.core.retake(docs)?;
        for (row, delta) in r.deltas {
            ctx.client.batch_inc(WORD_TOPIC, row, &delta)?;
        }
        st.rows = st.core.row_ids();
        tracing::info!(
            worker = ctx.worker(),
            workers = ?st.members,
            kept = r.kept,
            dropped = r.dropped,
            drawn = r.drawn,
            "ps-lda documents taken again"
        );
        Ok(())
    }
}
