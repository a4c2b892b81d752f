// Runs operation sequences on the reference's AsyncBook (the compiled async-task.ts whose
// path is the first argument) and prints every answer as JSON.
//
// stdin: {"retentionVersions": n, "sequences": [[op, ...], ...]}, each op an array:
//   ["create", id, nowMs, ttlMs, maxAttempts]   ["apply", taskId, event, callbackId|null]
//   ["expire", taskId]                          ["resume", taskId, cursorVersion]
//   ["deliver", taskId, key, nowMs]             ["get", taskId]        ["drain"]
// stdout: one list of answers per sequence, each answer the whole result object, or
// {"error": code} for what the reference throws. A fresh book runs each sequence.
//
// "expire" is asyncbook's book.expire(id): apply(id, {type: "expire", atMs: deadline})
// without a callback id, answered as a transition (no duplicateCallback).
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const { AsyncBook } = await import(pathToFileURL(process.argv[2]).href);
const { AiError } = await import(pathToFileURL(process.argv[3]).href);

function unknown(taskId) {
  return new AiError("invalid-request", `async-task: 未知任务 ${taskId}`);
}

function run(book, op) {
  const [kind, ...args] = op;
  switch (kind) {
    case "create": {
      const [id, nowMs, ttlMs, maxAttempts] = args;
      return book.create({ id, nowMs, ttlMs, maxAttempts });
    }
    case "apply": {
      const [taskId, event, callbackId] = args;
      return book.apply(taskId, event, callbackId === null ? undefined : callbackId);
    }
    case "expire": {
      const task = book.get(args[0]);
      if (task === undefined) throw unknown(args[0]);
      const { duplicateCallback, ...transition } = book.apply(args[0], {
        type: "expire",
        atMs: task.expiresAtMs,
      });
      return transition;
    }
    case "resume":
      return book.resume(args[0], args[1]);
    case "deliver":
      return book.deliverResult(args[0], args[1], args[2]);
    case "get":
      return book.get(args[0]) ?? null;
    case "drain":
      return book.drainNotifications();
    default:
      throw new Error(`unknown operation ${kind}`);
  }
}

const input = JSON.parse(readFileSync(0, "utf8"));
const answers = input.sequences.map((ops) => {
  const book = new AsyncBook();
  book.retentionVersions = input.retentionVersions;
  return ops.map((op) => {
    try {
      return run(book, op);
    } catch (error) {
      if (error instanceof AiError) return { error: error.code };
      return { crash: String(error) };
    }
  });
});
process.stdout.write(JSON.stringify(answers));
