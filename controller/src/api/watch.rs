//! The gRPC `Runs` service: `WatchRun` serves the same frames as the SSE stream. Every
//! method is behind [`super::auth::grpc_guard`].

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use iohr_proto::runs::runs_server::Runs;
use iohr_proto::runs::{CompareAnswer, CompareRequest, RunFrame, WatchRunRequest};
use tonic::{Request, Response, Status};

use super::auth::{Caller, ReadScope};
use super::events::{frame_stream, join};
use crate::Shared;

pub struct RunsService {
    shared: Shared,
}

impl RunsService {
    pub fn new(shared: Shared) -> RunsService {
        RunsService { shared }
    }
}

type FrameStream = Pin<Box<dyn Stream<Item = Result<RunFrame, Status>> + Send>>;

/// The caller of a gRPC request, authorized by [`super::auth::grpc_guard`] before the message was read.
fn caller<T>(request: &Request<T>) -> Result<Caller<ReadScope>, Status> {
    request
        .extensions()
        .get::<Caller<ReadScope>>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("send authorization: Bearer <token>"))
}

#[tonic::async_trait]
impl Runs for RunsService {
    type WatchRunStream = FrameStream;

    async fn watch_run(
        &self,
        request: Request<WatchRunRequest>,
    ) -> Result<Response<FrameStream>, Status> {
        let caller = caller(&request)?;
        let WatchRunRequest {
            run_id,
            after_frame,
        } = request.into_inner();
        self.shared
            .store
            .run_of_account(caller.account_id(), &run_id)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?
            .ok_or_else(|| Status::not_found(format!("run {run_id} not found")))?;
        super::events::frames_kept(&self.shared, &run_id)
            .await
            .map_err(|e| Status::failed_precondition(e.message))?;
        let live = join(&self.shared, &run_id, caller.account_id())
            .map_err(|e| Status::resource_exhausted(e.message))?;
        let stream = frame_stream(self.shared.clone(), run_id, after_frame, live).map(|frame| {
            Ok(RunFrame {
                run_id: frame.run_id.clone(),
                number: frame.number,
                kind: frame.kind.clone(),
                payload_json: frame.payload.to_string(),
                at_ms: frame.at,
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn compare(
        &self,
        request: Request<CompareRequest>,
    ) -> Result<Response<CompareAnswer>, Status> {
        let caller = caller(&request)?;
        let CompareRequest {
            before,
            after,
            noise_floor,
        } = request.into_inner();
        let floor = (noise_floor != 0.0).then_some(noise_floor);
        let comparison =
            super::compare::compare_runs(&self.shared, caller.account_id(), &before, &after, floor)
                .await
                .map_err(|e| match e.status.as_u16() {
                    404 => Status::not_found(e.message),
                    409 => Status::failed_precondition(e.message),
                    400 => Status::invalid_argument(e.message),
                    429 => Status::resource_exhausted(e.message),
                    _ => Status::unavailable(e.message),
                })?;
        Ok(Response::new(CompareAnswer {
            verdict: comparison.verdict.as_str().to_string(),
            lines: comparison.lines(),
            comparison_json: serde_json::to_string(&comparison).unwrap_or_default(),
        }))
    }
}
