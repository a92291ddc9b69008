//! The `--jobs` places of running workers. The scheduler starts a task only with a
//! [`Permit`]; the task holds it while its worker runs, and either to its end or, where its
//! commit may overlap the next worker (`task::hold_while_committing`), gives it
//! back early and says so, which wakes the scheduler to start the next task.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// The places, and the word of those given back early.
pub(super) struct Permits {
    places: Arc<Semaphore>,
    freed: mpsc::UnboundedSender<()>,
    freed_rx: mpsc::UnboundedReceiver<()>,
}

/// One running worker's place.
pub(super) struct Permit {
    _place: OwnedSemaphorePermit,
    freed: mpsc::UnboundedSender<()>,
}

impl Permits {
    pub(super) fn new(jobs: usize) -> Self {
        let (freed, freed_rx) = mpsc::unbounded_channel();
        Self {
            places: Arc::new(Semaphore::new(jobs)),
            freed,
            freed_rx,
        }
    }

    /// A free place, if there is one.
    pub(super) fn take(&self) -> Option<Permit> {
        let place = self.places.clone().try_acquire_owned().ok()?;
        Some(Permit {
            _place: place,
            freed: self.freed.clone(),
        })
    }

    /// Waits until a task gives its place back before its end. (A task that holds its
    /// place to its end is seen ending instead.)
    pub(super) async fn given_back(&mut self) {
        // The sender is in `self`: the channel never closes.
        self.freed_rx.recv().await;
    }
}

impl Permit {
    /// `work`, holding this place until it ends.
    pub(super) async fn held_over<T>(self, work: impl Future<Output = T>) -> T {
        let _held = self;
        work.await
    }

    /// Gives the place back before the task ends, and wakes the scheduler.
    pub(super) fn give_back(self) {
        let freed = self.freed.clone();
        drop(self);
        // The scheduler holds the receiver for as long as tasks run.
        let _ = freed.send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_place_given_back_is_free_again_and_said() {
        let mut permits = Permits::new(1);
        let held = permits.take().unwrap();
        assert!(permits.take().is_none(), "two places of one");
        held.give_back();
        permits.given_back().await;
        let again = permits.take();
        assert!(again.is_some(), "the place given back is not free");
        drop(again);
        // Dropped, not given back: free, but nothing said.
        assert!(permits.take().is_some());
        assert!(permits.freed_rx.try_recv().is_err());
    }
}
