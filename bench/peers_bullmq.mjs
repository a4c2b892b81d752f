// BullMQ's side of bench/bench_peers.py: one lifecycle at a time, driven over stdin/stdout.
//
//   node bench/peers_bullmq.mjs <folder holding node_modules/bullmq> <redis port>
//
// Reads one JSON command a line and answers one JSON line:
//   {"op": "prepare", "queue": q}  a Queue and a Worker (autorun off) on queue q, and one
//                                  lifecycle to warm them (connections open, scripts loaded)
//   {"op": "run", "n": n, "progress": p}
//                                  n lifecycles; answers {"writes": socket writes to Redis}
//   {"op": "cleanup"}              close the worker, obliterate and close the queue
//   {"op": "quit"}
// A lifecycle: queue.add(name, data, {removeOnComplete: true}), worker.getNextJob(token)
// (the worker's own fetch: moveToActive), [job.updateProgress(50)], then
// job.moveToCompleted(result, token, false). The Python side reads INFO around "run".
import { createRequire } from "node:module";
import net from "node:net";
import { join } from "node:path";
import readline from "node:readline";

const [folder, port] = process.argv.slice(2);
const require = createRequire(join(folder, "package.json"));
const { Queue, Worker } = require("bullmq");
const IORedis = require("ioredis");

let counting = false;
let writes = 0;
const write = net.Socket.prototype.write;
net.Socket.prototype.write = function counted(...args) {
  if (counting) writes += 1;
  return write.apply(this, args);
};

const connection = new IORedis({ host: "127.0.0.1", port: Number(port), maxRetriesPerRequest: null });
let queue = null;
let worker = null;
let tokens = 0;

async function lifecycle(progress) {
  await queue.add("resize", { args: [42, "thumb"], kwargs: { size: 256 } }, { removeOnComplete: true });
  const token = `bench:${tokens++}`;
  const job = await worker.getNextJob(token);
  if (!job) throw new Error("no job to take");
  if (progress) await job.updateProgress(50);
  await job.moveToCompleted({ thumb: "thumbs/42.png" }, token, false);
}

async function handle(command) {
  switch (command.op) {
    case "prepare":
      queue = new Queue(command.queue, { connection });
      worker = new Worker(command.queue, null, { connection, autorun: false });
      await queue.waitUntilReady();
      await worker.waitUntilReady();
      await lifecycle(true);
      return { ok: true };
    case "run": {
      writes = 0;
      counting = true;
      for (let i = 0; i < command.n; i++) await lifecycle(command.progress);
      counting = false;
      return { writes };
    }
    case "cleanup":
      await worker.close();
      await queue.obliterate({ force: true });
      await queue.close();
      queue = worker = null;
      return { ok: true };
    case "quit":
      await connection.quit();
      return { ok: true };
    default:
      throw new Error(`unknown op ${command.op}`);
  }
}

await connection.ping();
process.stdout.write(JSON.stringify({ ready: true }) + "\n");
const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  const command = JSON.parse(line);
  let answer;
  try {
    answer = await handle(command);
  } catch (error) {
    answer = { error: String(error && error.stack ? error.stack : error) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
  if (command.op === "quit") break;
}
process.exit(0);
