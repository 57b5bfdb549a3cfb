"""An upload handler for tests: placed before Django's storing handlers, it records how
many bytes of each request's files reach them (what could be kept in memory or on disk)."""

from django.core.files.uploadhandler import FileUploadHandler

#: Bytes passed on, one entry per request that had files (the latest last).
PASSED: list[int] = []


class RecordingHandler(FileUploadHandler):
    def __init__(self, request=None):
        super().__init__(request)
        self.index = None

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        PASSED.append(0)
        self.index = len(PASSED) - 1

    def receive_data_chunk(self, raw_data, start):
        PASSED[self.index] += len(raw_data)
        return raw_data

    def file_complete(self, file_size):
        return None
