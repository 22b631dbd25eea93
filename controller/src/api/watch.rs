//! The gRPC `Runs` service: `WatchRun` serves the same frames as the SSE stream.

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use iohr_proto::runs::runs_server::Runs;
use iohr_proto::runs::{RunFrame, WatchRunRequest};
use tonic::{Request, Response, Status};

use super::auth::{authenticate, bearer};
use super::events::frame_stream;
use crate::Shared;
use crate::store::Scope;

pub struct RunsService {
    shared: Shared,
}

impl RunsService {
    pub fn new(shared: Shared) -> RunsService {
        RunsService { shared }
    }
}

type FrameStream = Pin<Box<dyn Stream<Item = Result<RunFrame, Status>> + Send>>;

#[tonic::async_trait]
impl Runs for RunsService {
    type WatchRunStream = FrameStream;

    async fn watch_run(
        &self,
        request: Request<WatchRunRequest>,
    ) -> Result<Response<FrameStream>, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| axum::http::HeaderValue::from_str(v).ok());
        let caller = authenticate(&self.shared, bearer(header.as_ref()))
            .await
            .map_err(|e| Status::unauthenticated(e.message))?;
        caller
            .require(Scope::Read)
            .map_err(|e| Status::permission_denied(e.message))?;
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
        let stream = frame_stream(self.shared.clone(), run_id, after_frame).map(|frame| {
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
}
