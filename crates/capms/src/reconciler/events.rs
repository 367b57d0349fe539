//! The Events capms publishes on its objects: a Normal one for each step taken (allocated,
//! freed, created), a Warning for each failure.

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

pub struct Events {
    client: kube::Client,
    reporter: Reporter,
    /// Publishes the Warnings: a failure repeating within minutes (metal-api out of machines,
    /// say) becomes one Event whose count grows, not an Event per attempt.
    warnings: Recorder,
}

impl Events {
    pub fn new(client: kube::Client, instance: Option<String>) -> Events {
        let reporter = Reporter {
            controller: "capms".into(),
            instance,
        };
        Events {
            warnings: Recorder::new(client.clone(), reporter.clone()),
            client,
            reporter,
        }
    }

    /// Publishes a Normal Event on `obj`.
    pub fn note<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.publish(obj, EventType::Normal, reason, action, note)
    }

    /// Publishes a Warning Event on `obj`.
    pub fn warn<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.publish(obj, EventType::Warning, reason, action, note)
    }

    /// Sends the Event on its own task: the reconcile that took the step goes on without
    /// waiting for the apiserver's answer (under load a round trip of 0.1-0.5 s, in the middle
    /// of a machine's allocation). A failure to publish is logged, never fatal.
    fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        // A Normal Event reports a step taken once per object, so it goes out without the
        // shared recorder: that one keeps every Event it published for six minutes to count
        // repeats, which at 1,000 machines was about 3 MiB per round of allocations or frees,
        // for Events that never repeat.
        let recorder = match type_ {
            EventType::Warning => self.warnings.clone(),
            EventType::Normal => Recorder::new(self.client.clone(), self.reporter.clone()),
        };
        let object = obj.object_ref(&());
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &object).await {
                tracing::warn!(error = %e, reason = %event.reason, "publishing an event failed");
            }
        });
    }
}
