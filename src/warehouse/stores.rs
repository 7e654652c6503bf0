//! Object stores of warehouses elsewhere than this machine's disk: `s3://` (S3 and the stores
//! that speak its protocol), configured as delta-rs configures its own, from the `AWS_*`
//! environment variables.

use std::sync::{Arc, Once};

use datafusion::common::Result;
use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use datafusion::object_store::ObjectStore;
use url::Url;

/// Whether `url` names a store of [`store_for`].
pub fn is_s3(url: &Url) -> bool {
    ["s3", "s3a"].contains(&url.scheme())
}

/// The store at `url`, rooted at its path (`s3://bucket/path/` holds `path/…` as `…`).
pub fn store_for(url: &Url) -> anyhow::Result<Arc<dyn ObjectStore>> {
    static HANDLERS: Once = Once::new();
    HANDLERS.call_once(|| deltalake::aws::register_handlers(None));
    Ok(deltalake::logstore::store_for(url, std::iter::empty::<(String, String)>())?)
}

/// DataFusion's registry of object stores, which also opens an `s3://bucket` it has not been
/// given: the executors of a Ballista cluster, which are told of a warehouse only by the file
/// paths of the plans they run, find its store this way.
#[derive(Debug, Default)]
pub struct ObjectStores {
    known: DefaultObjectStoreRegistry,
}

impl ObjectStoreRegistry for ObjectStores {
    fn register_store(&self, url: &Url, store: Arc<dyn ObjectStore>) -> Option<Arc<dyn ObjectStore>> {
        self.known.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        self.known.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        match self.known.get_store(url) {
            Err(unknown) if is_s3(url) => {
                let bucket = Url::parse(&format!("{}://{}", url.scheme(), url.authority())).map_err(|_| unknown)?;
                let store = store_for(&bucket).map_err(|e| {
                    datafusion::common::DataFusionError::External(format!("cannot open {bucket}: {e:#}").into())
                })?;
                self.known.register_store(&bucket, store.clone());
                Ok(store)
            }
            known => known,
        }
    }
}
