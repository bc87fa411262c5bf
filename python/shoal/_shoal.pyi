"""Type stubs of the native module (`shoal._shoal`). Use the `shoal`
package's `connect`, `Engine` and `Dataset`, which wrap these."""

from typing import List, Optional, Tuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

class ShoalError(Exception): ...
class InvalidInput(ShoalError): ...
class NotFound(ShoalError): ...
class Conflict(ShoalError): ...
class Overloaded(ShoalError): ...
class Cancelled(ShoalError): ...
class DeadlineExceeded(ShoalError): ...
class InternalError(ShoalError): ...

class Engine:
    def __init__(self, path: str, config_toml: str = "") -> None: ...
    def create_dataset(self, name: str, data: pa.Table | pa.RecordBatch, metric: str) -> Dataset: ...
    def open(self, name: str) -> Dataset: ...
    def dataset_names(self) -> List[str]: ...
    def stats_json(self) -> str: ...
    def shutdown(self) -> None: ...

class Dataset:
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def schema(self) -> pa.Schema: ...
    def count_rows(self) -> int: ...
    def vector_columns(self) -> List[Tuple[str, int, str]]: ...
    def add(self, data: pa.Table | pa.RecordBatch) -> int: ...
    def delete(self, filter: str) -> int: ...
    def create_index(
        self,
        index_type: str,
        partitions: int,
        sub_vectors: Optional[int] = None,
        column: Optional[str] = None,
        seed: Optional[int] = None,
    ) -> int: ...
    def search(
        self,
        vector: npt.NDArray[np.float32],
        k: int,
        filter: Optional[str] = None,
        postfilter: bool = False,
        select: Optional[List[str]] = None,
        nprobes: Optional[int] = None,
        refine_factor: Optional[int] = None,
        column: Optional[str] = None,
        version: Optional[int] = None,
        exact: bool = False,
        timeout_ms: Optional[int] = None,
    ) -> pa.RecordBatch: ...
    async def search_async(
        self,
        vector: npt.NDArray[np.float32],
        k: int,
        filter: Optional[str] = None,
        postfilter: bool = False,
        select: Optional[List[str]] = None,
        nprobes: Optional[int] = None,
        refine_factor: Optional[int] = None,
        column: Optional[str] = None,
        version: Optional[int] = None,
        exact: bool = False,
        timeout_ms: Optional[int] = None,
    ) -> pa.RecordBatch: ...
    def search_batch(
        self,
        matrix: npt.NDArray[np.float32],
        k: int,
        filter: Optional[str] = None,
        postfilter: bool = False,
        select: Optional[List[str]] = None,
        nprobes: Optional[int] = None,
        refine_factor: Optional[int] = None,
        column: Optional[str] = None,
        version: Optional[int] = None,
        exact: bool = False,
        explain: bool = False,
    ) -> Tuple[pa.RecordBatch, Optional[str]]: ...
