//! `napi_by_id()`: the table of NAPI instances by id.

use super::{Napi, NapiId, MIN_NAPI_ID};
use rxpath_frames::RxQueue;
use std::collections::HashMap;

/// `napi_by_id()`: the table of NAPI instances by id. Ids start at
/// [`MIN_NAPI_ID`] and are never reused while the table lives (the kernel
/// avoids collisions the same way in `napi_hash_add`).
#[derive(Debug)]
pub struct NapiTable<H> {
    next: u32,
    by_id: HashMap<NapiId, H>,
}

impl<H> Default for NapiTable<H> {
    fn default() -> Self {
        NapiTable {
            next: MIN_NAPI_ID,
            by_id: HashMap::new(),
        }
    }
}

impl<H> NapiTable<H> {
    /// Give `napi` the next id and register `handle` under it
    /// (`napi_hash_add`).
    pub fn add<Q: RxQueue>(
        &mut self,
        napi: &mut Napi<Q>,
        handle: impl FnOnce(&mut Napi<Q>) -> H,
    ) -> NapiId {
        while self.by_id.contains_key(&NapiId(self.next)) || self.next < MIN_NAPI_ID {
            self.next = self.next.wrapping_add(1);
        }
        let id = NapiId(self.next);
        self.next = self.next.wrapping_add(1);
        napi.set_id(id);
        let h = handle(napi);
        self.by_id.insert(id, h);
        id
    }

    /// Look up a NAPI by id (`napi_by_id`).
    pub fn get(&self, id: NapiId) -> Option<&H> {
        self.by_id.get(&id)
    }

    /// Remove a NAPI (`napi_hash_del`).
    pub fn remove(&mut self, id: NapiId) -> Option<H> {
        self.by_id.remove(&id)
    }

    /// Number of registered NAPIs.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}
