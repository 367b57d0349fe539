//! Partitions, sizes, images and projects: the master data every allocation is checked against.

use super::*;

impl State {
    pub fn project(&self, id: &str) -> SimResult<&Project> {
        self.projects.get(id).ok_or_else(|| {
            SimError::new(
                404,
                format!("rpc error: code = NotFound desc = project with id:{id} not found"),
            )
        })
    }

    pub fn partition(&self, id: &str) -> SimResult<&Partition> {
        self.partitions
            .get(id)
            .ok_or_else(|| SimError::not_found("partition", id))
    }

    pub fn size(&self, id: &str) -> SimResult<&Size> {
        self.sizes
            .get(id)
            .ok_or_else(|| SimError::not_found("size", id))
    }

    pub fn image(&self, id: &str) -> SimResult<&Image> {
        self.images
            .get(id)
            .ok_or_else(|| SimError::not_found("image", id))
    }

    /// Resolution as allocation and `/latest` do it.
    pub fn image_latest(&self, requested: &str) -> SimResult<&Image> {
        let id = images::resolve(requested, self.images.keys().map(String::as_str))
            .map_err(|e| SimError::not_found("image", &e.to_string()))?;
        self.image(id)
    }

    /// `POST /v1/image/find`: images matching every given field; `os` and `version` compare
    /// against the id's `<os>-<version>` parts.
    pub fn image_find(&self, req: &ImageFindRequest) -> Vec<Image> {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        self.images
            .values()
            .filter(|i| {
                let (os, version) = images::split_id(&i.id).unwrap_or((i.id.as_str(), ""));
                eq(&req.id, &i.id)
                    && eq(&req.name, &i.name)
                    && eq(&req.os, os)
                    && eq(&req.version, version)
                    && eq(&req.classification, &i.classification)
                    && req.features.iter().all(|f| i.has_feature(f))
            })
            .cloned()
            .collect()
    }

    /// `POST /v1/project/find`.
    pub fn project_find(&self, req: &ProjectFindRequest) -> Vec<Project> {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        self.projects
            .values()
            .filter(|p| {
                eq(&req.id, &p.meta.id)
                    && eq(&req.name, &p.name)
                    && eq(&req.tenant_id, &p.tenant_id)
            })
            .cloned()
            .collect()
    }

    /// `POST /v1/partition/capacity`: per partition and size, how many machines are allocated,
    /// waiting (free), still booting (other) or faulty (dead or crash-looping).
    pub fn partition_capacity(
        &self,
        req: &PartitionCapacityRequest,
    ) -> SimResult<Vec<PartitionCapacity>> {
        if let Some(id) = &req.id {
            self.partition(id)?;
        }
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        let mut report = Vec::new();
        for p in self.partitions.values().filter(|p| eq(&req.id, &p.id)) {
            let mut by_size: BTreeMap<&str, ServerCapacity> = BTreeMap::new();
            for m in self
                .machines
                .values()
                .filter(|m| m.partition == p.id && eq(&req.sizeid, &m.size))
            {
                let row = by_size.entry(&m.size).or_insert_with(|| ServerCapacity {
                    size: m.size.clone(),
                    ..Default::default()
                });
                self.count_capacity(row, m);
            }
            report.push(PartitionCapacity {
                id: p.id.clone(),
                name: p.name.clone(),
                description: p.description.clone(),
                servers: by_size.into_values().collect(),
            });
        }
        Ok(report)
    }

    fn count_capacity(&self, row: &mut ServerCapacity, m: &MachineRecord) {
        row.total += 1;
        let faulty = m.crash_loop || self.liveliness(m) != liveliness::ALIVE;
        if m.allocation.is_some() {
            row.allocated += 1;
            if m.events
                .first()
                .is_some_and(|e| e.event == event::PHONED_HOME)
            {
                row.phoned_home += 1;
            }
        } else if faulty {
            row.faulty += 1;
            row.faultymachines.push(m.id.clone());
        } else if m.waiting {
            row.waiting += 1;
            row.free += 1;
            row.allocatable += 1;
        } else {
            row.other += 1;
            row.othermachines.push(m.id.clone());
        }
        if faulty && m.allocation.is_some() {
            row.unavailable += 1;
        }
    }
}
