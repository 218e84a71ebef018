//! A lock's key, opened for one command: the type check, the [`Lock`] value and the lease.
//!
//! `redis-module`'s `RedisKeyWritable` hides its raw key, and the lease needs
//! `RedisModule_SetAbsExpire` and `RedisModule_GetExpire`, which the crate does not wrap. So
//! this is the one place that calls the module API on keys (and on the selected database)
//! directly; everything else uses [`LockKey`].

use std::os::raw::c_void;
use std::ptr::NonNull;

use redis_module::{Context, RedisError, RedisString, raw};

use crate::api::{api, ok_or_error};
use crate::datatype::LOCK_TYPE;
use crate::stats;
use leasehold_core::lock::Holding;
use leasehold_core::lock::Lock;
use leasehold_core::owner::Owner;

/// A key opened by a `LOCK.*` command; closed when dropped.
pub struct LockKey {
    /// The open key; `None` when a key opened for reading does not exist.
    key: Option<NonNull<raw::RedisModuleKey>>,
}

impl LockKey {
    /// Opens `name` for reading. An expired lease reads as no lock (also on a replica).
    ///
    /// # Errors
    /// `WRONGTYPE` when the key holds another type.
    pub fn read(ctx: &Context, name: &RedisString) -> Result<Self, RedisError> {
        Self::open(ctx, name, raw::KeyMode::READ)
    }

    /// Opens `name` for writing; an expired lease is deleted first, as Redis does for any key.
    ///
    /// # Errors
    /// `WRONGTYPE` when the key holds another type.
    pub fn write(ctx: &Context, name: &RedisString) -> Result<Self, RedisError> {
        Self::open(ctx, name, raw::KeyMode::READ | raw::KeyMode::WRITE)
    }

    fn open(ctx: &Context, name: &RedisString, mode: raw::KeyMode) -> Result<Self, RedisError> {
        let key = NonNull::new(raw::open_key(ctx.get_raw(), name.inner, mode));
        let opened = Self { key };
        if let Some(key) = opened.key {
            let kind = unsafe { api(raw::RedisModule_KeyType)?(key.as_ptr()) };
            if kind != raw::REDISMODULE_KEYTYPE_EMPTY as i32 && !opened.holds_lock_type() {
                return Err(RedisError::WrongType);
            }
        }
        Ok(opened)
    }

    fn holds_lock_type(&self) -> bool {
        self.key.is_some_and(|key| is_lock(key.as_ptr()))
    }

    fn value(&self) -> Option<NonNull<Lock>> {
        let key = self.key?;
        if !self.holds_lock_type() {
            return None;
        }
        let get = unsafe { raw::RedisModule_ModuleTypeGetValue }?;
        NonNull::new(unsafe { get(key.as_ptr()) }.cast::<Lock>())
    }

    /// The lock held under this key, or `None` when the lock is free.
    #[must_use]
    pub fn lock(&self) -> Option<&Lock> {
        self.value().map(|lock| unsafe { &*lock.as_ptr() })
    }

    /// Lets `decide` change the lock (`None` while free) and stores what it leaves, as
    /// [`Self::take`] and then [`Self::put`] do, finding the value once.
    ///
    /// # Errors
    /// When the key was opened for reading only, or cannot be written.
    #[inline]
    pub fn update<T>(
        &mut self,
        decide: impl FnOnce(&mut Option<Lock>) -> T,
    ) -> Result<T, RedisError> {
        let stored = self.value();
        let mut lock = stored.map(move_out);
        let decided = decide(&mut lock);
        self.restore(stored, lock)?;
        Ok(decided)
    }

    /// Moves the lock out of the key for the core to decide on (a few words), leaving a
    /// placeholder until [`Self::put`]; `None` when the lock is free.
    #[inline]
    pub fn take(&mut self) -> Option<Lock> {
        self.value().map(move_out)
    }

    /// Stores what the core left after [`Self::take`].
    ///
    /// # Errors
    /// When the key was opened for reading only, or cannot be written.
    #[inline]
    pub fn put(&mut self, lock: Option<Lock>) -> Result<(), RedisError> {
        let stored = self.value();
        self.restore(stored, lock)
    }

    /// Stores `lock` where the key's value was (`stored`, the placeholder): in place when the
    /// key exists (keeping its lease), under a new key without expiry (until
    /// [`Self::set_deadline`]), or deleting the key when the lock is free now.
    #[inline]
    fn restore(
        &mut self,
        stored: Option<NonNull<Lock>>,
        lock: Option<Lock>,
    ) -> Result<(), RedisError> {
        match (stored, lock) {
            (Some(value), Some(lock)) => unsafe { *value.as_ptr() = lock },
            (Some(_), None) => self.delete()?,
            (None, Some(lock)) => self.store(lock)?,
            (None, None) => {}
        }
        Ok(())
    }

    /// Stores `lock` under this key, which holds no lock (opened for writing).
    fn store(&mut self, lock: Lock) -> Result<(), RedisError> {
        let key = self.writable()?;
        let value = Box::into_raw(Box::new(lock));
        let stored = unsafe {
            api(raw::RedisModule_ModuleTypeSetValue)?(
                key.as_ptr(),
                *LOCK_TYPE.raw_type.borrow(),
                value.cast::<c_void>(),
            )
        };
        ok_or_error(stored, "ERR could not store the lock").inspect_err(|_| {
            drop(unsafe { Box::from_raw(value) });
        })
    }

    /// Sets the lease to end at unix time `deadline_ms` (the key's absolute expiry, as
    /// `PEXPIREAT` does).
    ///
    /// # Errors
    /// When the key is empty or opened for reading only.
    pub fn set_deadline(&mut self, deadline_ms: i64) -> Result<(), RedisError> {
        let key = self.writable()?;
        let status = unsafe { api(raw::RedisModule_SetAbsExpire)?(key.as_ptr(), deadline_ms) };
        ok_or_error(status, "ERR could not set the lease")
    }

    /// The lease left in ms (what `PTTL` replies), or `None` for a key without expiry, or with
    /// no lock (Redis 8.2's `RedisModule_GetExpire` reads the value before it checks there is
    /// one, and crashes on an empty key).
    #[must_use]
    pub fn remaining_ms(&self) -> Option<i64> {
        self.value()?;
        let key = self.key?;
        let get = unsafe { raw::RedisModule_GetExpire }?;
        let remaining = unsafe { get(key.as_ptr()) };
        (remaining >= 0).then_some(remaining)
    }

    /// Deletes the key (opened for writing).
    fn delete(&mut self) -> Result<(), RedisError> {
        let key = self.writable()?;
        unsafe { api(raw::RedisModule_DeleteKey)?(key.as_ptr()) };
        stats::forget_unlinked();
        Ok(())
    }

    fn writable(&self) -> Result<NonNull<raw::RedisModuleKey>, RedisError> {
        self.key
            .ok_or(RedisError::Str("ERR the lock key is not open for writing"))
    }
}

/// Moves the lock stored at `value` out, leaving [`vacant`] until it is restored.
fn move_out(value: NonNull<Lock>) -> Lock {
    std::mem::replace(unsafe { &mut *value.as_ptr() }, vacant())
}

/// What a key holds for the moment its lock is out with the core: an empty exclusive holding,
/// which owns no heap memory.
fn vacant() -> Lock {
    Lock::Exclusive(Holding {
        owner: Owner::new(b""),
        token: 0,
        holds: 0,
        tie: None,
    })
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            raw::close_key(key.as_ptr());
        }
    }
}

/// The database the context works on (`SELECT`; for an event, the event's database).
#[must_use]
pub fn selected_db(ctx: &Context) -> i32 {
    unsafe { raw::RedisModule_GetSelectedDb }.map_or(0, |get| unsafe { get(ctx.get_raw()) })
}

/// Makes the context work on database `db`, as `SELECT` does.
///
/// # Errors
/// When the database does not exist.
pub fn select_db(ctx: &Context, db: i32) -> Result<(), RedisError> {
    let status = unsafe { api(raw::RedisModule_SelectDb)?(ctx.get_raw(), db) };
    ok_or_error(status, "ERR DB index is out of range")
}

/// True when `key`, opened by Redis for a server event, holds a lock.
pub fn is_lock(key: *mut raw::RedisModuleKey) -> bool {
    let Some(get_type) = (unsafe { raw::RedisModule_ModuleTypeGetType }) else {
        return false;
    };
    !key.is_null() && unsafe { get_type(key) } == *LOCK_TYPE.raw_type.borrow()
}
