# -*- coding: utf-8 -*-
# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Defaults host_root / manufacturers from inventory; with remote_src=false, ships the source first.

A source on the controller (a directory or a tarball, looked up like any C(files/) needle) is sent
to the task's remote temporary directory as one file - a directory is packed into a tar archive on
the controller first, symlinks kept - and the module then stages from there. The module checks
every archive member before extracting it, whichever side the archive came from.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import tarfile
import tempfile

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.gpustack.accelerators.plugins.plugin_utils.inventory_defaults import (
    InventoryDefaultsAction,
)

# the module's own words for an empty src (plugins/modules/preload_libraries.py)
SRC_REMEDY = "name the preload-library tree, a directory or a .tar / .tar.gz / .tar.xz archive of one"


class ActionModule(InventoryDefaultsAction):
    TRANSFERS_FILES = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = ActionBase.run(self, tmp, task_vars)
        args = self.defaulted_args(task_vars)
        try:
            remote_src = boolean(args.get("remote_src", True), strict=True)
        except TypeError as exc:
            result.update(failed=True, msg="remote_src: %s" % to_text(exc))
            return result
        if remote_src or args.get("src") is None:
            result.update(self._execute_module(module_args=args, task_vars=task_vars))
            return result
        # never looked up as a needle: an empty name would find the files/ directory itself
        if not to_text(args["src"]).strip():
            result.update(failed=True, msg="src is empty: %s" % SRC_REMEDY)
            return result

        local_dir = tempfile.mkdtemp(prefix="gpustack-preload-")
        try:
            try:
                source = self._find_needle("files", os.path.expanduser(args["src"]))
            except AnsibleError as exc:
                result.update(failed=True, msg="src %s not found on the controller: %s" % (args["src"], to_text(exc)))
                return result
            if os.path.isdir(source):
                packed = os.path.join(local_dir, "source.tar")
                try:
                    with tarfile.open(packed, "w") as tar:
                        tar.add(source, arcname=".")
                except (OSError, tarfile.TarError) as exc:
                    result.update(failed=True, msg="cannot pack %s on the controller: %s" % (source, to_text(exc)))
                    return result
                source = packed
            elif not os.path.isfile(source):
                result.update(failed=True, msg="src %s is neither a directory nor a file" % source)
                return result
            tmpdir = self._connection._shell.tmpdir or self._make_tmp_path()
            remote = self._connection._shell.join_path(tmpdir, "preload-source")
            self._transfer_file(source, remote)
            self._fixup_perms2((tmpdir, remote))
            args.update(src=remote, remote_src=True)
            result.update(self._execute_module(module_args=args, task_vars=task_vars))
            return result
        finally:
            shutil.rmtree(local_dir, ignore_errors=True)
            self._remove_tmp_path(self._connection._shell.tmpdir)
